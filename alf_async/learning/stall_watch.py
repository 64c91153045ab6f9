"""`StallWatch`: a learner that waits too long for data says so, with every stack.

A wait for a learn batch that outlives `warn_secs` logs one warning line and
writes the stack of every thread of the process (`faulthandler`) to a file in
the run's folder, so that a stall explains itself while it happens; the
`StarvationWatchdog` fails the run only much later (`learner_queue_timeout`).

Thread-safety: `guard()` is entered by one thread at a time (the one that
waits); the warning is written from a timer thread.
"""

import contextlib
import faulthandler
import os
import threading
import time
from typing import Callable, Optional

from absl import logging

from alf_async.errors import fires_after


class StallWatch:
    """Warns, once per wait, about a wait for data longer than `warn_secs`.

    The first wait is not watched: it is the pipeline starting (actor
    processes importing, envs being built), which takes as long as it takes;
    `StarvationWatchdog` bounds it.
    """

    def __init__(self, warn_secs: Optional[float], stacks_dir: Optional[str],
                 diagnose: Callable[[], str] = lambda: ""):
        """
        Args:
            warn_secs: seconds a wait may take before the warning (None or 0: never).
            stacks_dir: where the stacks files go (None: the warning alone).
            diagnose: the pipeline's state as it waits (the driver's
                `diagnose()`), in the warning and atop the stacks file.
        """
        if warn_secs is not None and warn_secs < 0:
            raise ValueError(f"LearnerLoop.stall_warning_secs must be >= 0, got {warn_secs}")
        self._warn_secs = warn_secs or None
        self._stacks_dir = stacks_dir
        self._diagnose = diagnose
        self.stalls = 0  # waits that outlived warn_secs
        self._waits = 0
        self.last_stacks_file = None

    def guard(self, what: str):
        """Warns if the block (a wait for `what`, not the first) outlives `warn_secs`."""
        self._waits += 1
        if self._warn_secs is None or self._waits == 1:
            return contextlib.nullcontext()
        return fires_after(self._warn_secs, self._warn, what)

    def _warn(self, what: str) -> None:
        self.stalls += 1
        try:
            state = self._diagnose()
        except Exception as error:  # pylint: disable=broad-except  # a warning, whatever
            state = f"no diagnosis: {error}"
        where = self._dump_stacks(state)
        logging.warning("The learner has waited %.1f s for %s%s%s", self._warn_secs, what,
                        f" ({state})" if state else "",
                        f"; every thread's stack is in {where}" if where else "")

    def _dump_stacks(self, state: str) -> Optional[str]:
        """Writes `state` and every thread's stack to a new file in `stacks_dir`; its
        path."""
        if self._stacks_dir is None:
            return None
        os.makedirs(self._stacks_dir, exist_ok=True)
        path = os.path.join(self._stacks_dir,
                            time.strftime("stall-%Y%m%d-%H%M%S") + f"-{self.stalls}.txt")
        with open(path, "w") as f:
            f.write(f"pid {os.getpid()}, threads: "
                    f"{', '.join(t.name for t in threading.enumerate())}\n{state}\n\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
        self.last_stacks_file = path
        return path
