"""Stopping a run cleanly on SIGINT or SIGTERM (the trainer and actor processes)."""

import os
import signal
import threading
import time
from typing import Callable

from absl import logging


class SignalStop:
    """Turns the first SIGINT/SIGTERM into a stop request; a second SIGINT exits now.

    Installed only in the main thread (where Python delivers signals).
    """

    def __init__(self, action: str = "stopping after this iteration"):
        """`action`: what the process does on the first signal, for its log line."""
        self.signum = None
        self._action = action
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def call_on_signal(self, callback: Callable[[], None], poll_secs: float = 0.1) -> None:
        """Calls `callback()` once, from a daemon thread, soon after the first signal.

        For what a signal handler must not do itself (take a lock the
        interrupted main thread may hold), such as stopping the driver's threads.
        """
        def watch():
            while self.signum is None:
                time.sleep(poll_secs)
            callback()

        threading.Thread(target=watch, name="SignalStopWatcher", daemon=True).start()

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        del frame
        if self.signum is not None and signum == signal.SIGINT:
            os._exit(128 + signum)
        self.signum = signum
        logging.warning("%s received: %s (again to exit now)", signal.Signals(signum).name,
                        self._action)
