"""The local backend: the launch's processes as subprocesses on this host.

Each command runs in a session of its own, so a terminal's Ctrl-C reaches the
launch alone and a signal reaches the command's own subprocesses (env
workers) too; and under the one rule for a parent's death (`reaper`): a
launch killed by SIGKILL takes its processes along, each sent SIGTERM first
(the learner saves its checkpoint). Warm spares
(`alf_async.supervision.spare`) start here too, at idle priority unless their
command line says `--normal_priority`.

Thread-safety: a `LocalBackend` is used from one thread (the parent-death
signal is tied to the thread that started a process). A Ray command host
(`ray_backend`) runs one on its node.
"""

import functools
import os
import signal
import subprocess
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging

from alf_async.supervision import reaper, spare as spare_lib
from alf_async.supervision.backend import ChildSpec
from alf_async.supervision.commands import free_ports

class LocalProcess:
    """A `backend.Process`: a `subprocess.Popen` leading a session of its own."""

    lost = None  # why its node was lost: never, on this host

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        self.pid = popen.pid

    @property
    def returncode(self) -> Optional[int]:
        return self.popen.returncode

    def poll(self) -> Optional[int]:
        return self.popen.poll()

    def signal(self, signum: int) -> None:
        """`signum` to its whole session (its subprocesses too), if any is left."""
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float) -> Optional[int]:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def promote(self) -> bool:
        """Writes the spare's word to its stdin; False when it died meanwhile."""
        try:
            self.popen.stdin.write(spare_lib.PROMOTE)
            self.popen.stdin.close()
            return True
        except (BrokenPipeError, OSError, AttributeError):
            return False

    def kill(self, wait: bool = True) -> None:
        """SIGKILLs its session at normal priority (an idle spare may otherwise wait
        long for a core to die on); with `wait`, reaps it too."""
        spare_lib.normal_priority(self.pid)
        self.signal(signal.SIGKILL)
        if wait and self.wait(timeout=10) is None:
            logging.error("launch: pid %d did not die on SIGKILL", self.pid)


class Spares:
    """Warm spares by name, on this host: started beside a running command, promoted
    by its restart. Used by `LocalBackend` for the launch, and by a Ray command
    host on its node.

    A command may keep more than one (`count`): faults that come sooner than a
    spare gets ready then still meet a ready one. The next starts only once
    the newest is ready (`spare.is_ready`), so that they never get ready at
    the same time, and the oldest is promoted first.
    """

    def __init__(self):
        self.waiting: Dict[str, List[LocalProcess]] = {}

    def promote(self, name: str) -> Optional[LocalProcess]:
        """`name`'s oldest spare alive, told to become its command; None when it has none."""
        spares = self.waiting.get(name, [])
        while spares:
            spare = spares.pop(0)
            if spare.promote():
                logging.info("launch: %s starts from its warm spare (pid %d)", name, spare.pid)
                return spare
            spare.kill()  # it died meanwhile
        return None

    def tend(self, name: str, spare_argv: Optional[Sequence[str]], running: bool,
             popen: Callable[[Sequence[str]], subprocess.Popen], count: int = 1) -> None:
        """Keeps `count` spares (`popen(spare_argv)`) of a running command: replaces one
        that died, and starts the next once the newest is ready."""
        spares = self.waiting.setdefault(name, [])
        for spare in [spare for spare in spares if spare.poll() is not None]:
            spare.kill()
            spares.remove(spare)
        if not (spare_argv and running) or len(spares) >= count:
            return
        if not spares or spare_lib.is_ready(spares[-1].pid):
            spares.append(LocalProcess(popen(spare_argv)))

    def drop(self, wait: bool) -> None:
        for spares in self.waiting.values():
            for spare in spares:
                spare.kill(wait=wait)
        if wait:
            self.waiting = {}


class LocalBackend:
    """A `backend.Backend` of subprocesses on this host."""

    name = "local"

    def __init__(self):
        self.spares = Spares()
        self._ports_given = set()  # to the learner's workers: each port once

    def place_learner(self, name: str, root_dir: str, port: int) -> tuple:
        """On this host (127.0.0.1, which the launch checked it can write `root_dir`
        from): `port` or a free one, and a free all-reduce port, none given before."""
        del name, root_dir
        ports = [port] if port else []
        for candidate in free_ports(8):  # free now, and apart from those given before
            if len(ports) < 2 and candidate not in self._ports_given and candidate != port:
                ports.append(candidate)
        if len(ports) < 2:
            raise ValueError("no free TCP port on 127.0.0.1 for the learner")
        self._ports_given.update(ports)
        return ("127.0.0.1", *ports)

    def start(self, spec: ChildSpec) -> LocalProcess:
        return self.spares.promote(spec.name) or LocalProcess(
            popen_in_session(spec.argv, spec.log_path))

    def tend(self, spec: ChildSpec, running: bool) -> None:
        self.spares.tend(spec.name, spec.spare_argv, running, functools.partial(
            popen_in_session, log_path=spec.log_path, spare=True), spec.spares)

    def drop_spares(self, wait: bool) -> None:
        self.spares.drop(wait)

    def close(self) -> None:
        self.spares.drop(wait=True)


def popen_in_session(argv: Sequence[str], log_path: Optional[str] = None,
                     spare: bool = False, **kwargs) -> subprocess.Popen:
    """Starts `argv` in a session of its own that dies with this process (`reaper`'s
    rule: SIGTERM, SIGKILL a grace later), its output
    appended to `log_path` (None: this process's); a `spare` reads its word on
    stdin and waits at idle priority unless told `--normal_priority`."""
    log = open(log_path, "ab") if log_path else None  # noqa: SIM115
    die = functools.partial(reaper.die_with_parent, os.getpid())
    idle = spare and spare_lib.NORMAL_PRIORITY not in argv
    stdout = kwargs.pop("stdout", log)
    try:
        popen = subprocess.Popen(
            list(argv), stdout=stdout, stderr=subprocess.STDOUT if stdout else None,
            stdin=subprocess.PIPE if spare else None, start_new_session=True,
            preexec_fn=(lambda: (die(), spare_lib.idle_priority())) if idle else die, **kwargs)
        reaper.guard(popen.pid)
        return popen
    finally:
        if log:
            log.close()
