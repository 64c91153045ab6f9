"""Holding back other libraries' chatter at its source, for the length of one call.

Used where a library's log lines are expected and say nothing to our user:
gin's Python-package lookup of an `include` by name (found afterwards on the
search path; a name found nowhere still fails the parse with an IOError),
TensorFlow's INFO lines while a SavedModel is written, and Reverb's C++ INFO
lines.
"""

import contextlib
import logging
import os
import sys
import threading


class _DropFrom(logging.Filter):
    def __init__(self, path_part: str, below: int):
        super().__init__()
        self._path_part, self._below = path_part, below

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self._path_part in record.pathname and record.levelno < self._below)


@contextlib.contextmanager
def held_back(path_part: str, below: int = logging.WARNING):
    """Drops log records below `below` logged from files whose path holds `path_part`.

    Covers the root logger (plain `logging` calls) and absl's logger. Records of
    our own modules, and the library's records at `below` or above, still show.
    """
    path_part = path_part.replace("/", os.sep)
    drop = _DropFrom(path_part, below)
    loggers = [logging.getLogger(), logging.getLogger("absl"), logging.getLogger("tensorflow")]
    for logger in loggers:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(drop)


_native = dict(lock=threading.Lock(), depth=0, saved_fd=None)


@contextlib.contextmanager
def native_stderr_held():
    """Sends what is written to file descriptor 2 to /dev/null for the length of one call.

    For Reverb's C++ INFO lines (a server starting and stopping, an in-process
    sampler made), which no setting turns off. It is process-wide: anything
    another thread writes to stderr meanwhile is dropped too, so it wraps
    short calls only (milliseconds). Thread-safe; nested uses share one hold.
    """
    with _native["lock"]:
        if _native["depth"] == 0:
            sys.stderr.flush()
            _native["saved_fd"] = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        _native["depth"] += 1
    try:
        yield
    finally:
        with _native["lock"]:
            _native["depth"] -= 1
            if _native["depth"] == 0:
                os.dup2(_native["saved_fd"], 2)
                os.close(_native["saved_fd"])
