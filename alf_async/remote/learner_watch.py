"""`LearnerWatch`: an actor process whose learner stopped answering ends, whatever it
is blocked in.

The actor's own loops raise `LearnerGone` when the learner has not answered for
`server_timeout_secs` (or sent no first weights within `connect_timeout_secs`);
that is the orderly end. On a starved machine, or in a call that waits without
a bound, that check may come late or never: this thread, which needs almost no
CPU, ends the process `grace_secs` after the limit, with one line and exit
status `EXIT_LEARNER_GONE`.

Thread-safety: `contact()` may be called from any thread (a float assignment).
"""

import os
import threading
import time

EXIT_LEARNER_GONE = 3  # the learner stopped answering (its training ended, or it failed)


class LearnerWatch(threading.Thread):
    """Times the learner's silence; ends the process when it lasts too long."""

    _POLL_SECS = 1.0

    def __init__(self, describe: str, server_timeout_secs: float, connect_timeout_secs: float,
                 grace_secs: float = 10.0, ends_process: bool = True):
        """
        Args:
            describe: who is waiting for whom, for the line (`actor task 0, learner at H:P`).
            server_timeout_secs: the longest silence once the learner has answered.
            connect_timeout_secs: the longest wait for its first answer.
            grace_secs: how long after either limit the orderly end may take.
            ends_process: whether this watch may end the process (the actor command's);
                False: it only times the silence (an actor inside another program).
        """
        super().__init__(name="LearnerWatch", daemon=True)
        self._ends_process = ends_process
        self._describe = describe
        self._server_timeout, self._connect_timeout = server_timeout_secs, connect_timeout_secs
        self._grace = grace_secs
        self._born = time.monotonic()
        self.last_contact = None  # monotonic time of the learner's last answer
        self._armed = False
        self._end_at = None  # monotonic time by which the process must be gone

    def arm(self) -> None:
        """Watches from now on (until `disarm()`): the actor waits for its learner."""
        self._armed = True
        self._start_once()

    def disarm(self) -> None:
        """Stops watching: the actor no longer waits (it ends, or failed otherwise)."""
        self._armed = False

    def end_within(self, seconds: float) -> None:
        """The learner is gone and the actor said so: its clean-up (env workers, threads)
        may take `seconds`, then the process ends with `EXIT_LEARNER_GONE`."""
        self._end_at = time.monotonic() + seconds
        self._start_once()

    def _start_once(self) -> None:
        if self._ends_process and not self.is_alive():
            self.start()

    def contact(self) -> None:
        """The learner answered just now."""
        self.last_contact = time.monotonic()

    def silence(self) -> float:
        """Seconds since the learner last answered (since the start, before it ever did)."""
        return time.monotonic() - (self._born if self.last_contact is None
                                   else self.last_contact)

    def limit(self) -> float:
        """The silence the orderly end allows: server or connect timeout."""
        return self._connect_timeout if self.last_contact is None else self._server_timeout

    def run(self) -> None:
        while not self._too_late():
            time.sleep(self._POLL_SECS)
        if self._end_at is None:  # else the actor has said why already
            os.write(2, (f"{self._describe}: no answer for {self.silence():.0f} s (limit "
                         f"{self.limit():.0f} s): exiting\n").encode())
        os._exit(EXIT_LEARNER_GONE)  # the main thread may hold locks: no orderly exit

    def _too_late(self) -> bool:
        if self._end_at is not None:
            return time.monotonic() > self._end_at
        return self._armed and self.silence() > self.limit() + self._grace
