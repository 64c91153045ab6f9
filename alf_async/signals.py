"""Stopping a run cleanly on SIGINT or SIGTERM (the trainer and actor processes)."""

import os
import signal
import threading

from absl import logging


class SignalStop:
    """Turns the first SIGINT/SIGTERM into a stop request; a second SIGINT exits now.

    Installed only in the main thread (where Python delivers signals).
    """

    def __init__(self):
        self.signum = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        del frame
        if self.signum is not None and signum == signal.SIGINT:
            os._exit(128 + signum)
        self.signum = signum
        logging.warning("%s received: stopping after this iteration (again to exit now)",
                        signal.Signals(signum).name)
