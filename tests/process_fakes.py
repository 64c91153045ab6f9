"""A deterministic `backend.Process` for the tests of what runs many processes (the run
queue, an experiment's placement): no process is started."""

import signal
from typing import Callable, Optional


class FakeProcess:
    """Exits with `code` after `polls` polls (`lost`: why its node was lost, as Ray says;
    None: not lost); a SIGTERM ends it unless `ignores_term`, a SIGKILL always; every
    signal is recorded in `signals`. `on_success()` runs when it exits 0 by itself."""

    def __init__(self, code: int = 0, lost: Optional[str] = None, polls: int = 1,
                 ignores_term: bool = False, on_success: Optional[Callable[[], None]] = None,
                 address: str = "127.0.0.8"):
        self.code, self.lost, self.polls, self.ignores_term = code, lost, polls, ignores_term
        self.on_success, self.address = on_success, address
        self.returncode, self.signals = None, []

    def poll(self):
        self.polls -= 1
        if self.returncode is None and self.polls <= 0:
            self.returncode = self.code
            if self.code == 0 and self.on_success:
                self.on_success()
        return self.returncode

    def signal(self, signum):
        self.signals.append(signum)
        if signum == signal.SIGKILL or not self.ignores_term:
            self.returncode = -signum

    def wait(self, timeout):
        del timeout
        return self.returncode
