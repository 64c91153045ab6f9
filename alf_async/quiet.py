"""Holding back other libraries' chatter at its source, for the length of one call.

Used where a library's log lines are expected and say nothing to our user:
gin's Python-package lookup of an `include` by name (found afterwards on the
search path; a name found nowhere still fails the parse with an IOError), and
TensorFlow's INFO lines while a SavedModel is written.
"""

import contextlib
import logging
import os


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
