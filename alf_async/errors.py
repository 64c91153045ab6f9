"""The errors training stops with, and how a failing thread reports one.

Every thread of the driver (and the learner loop's prefetch thread) fails
the same way: it records a `ThreadError` naming itself in the shared
`tf.train.Coordinator`, then closes the queues so that no other thread stays
blocked. The first error recorded is the one `AsyncOffPolicyDriver.stop()`
and `get_training_exps()` re-raise; `python -m alf_async.train` exits with 1
and prints it.
"""

import sys
from typing import Callable

import tensorflow as tf

QUEUE_CLOSED = (tf.errors.OutOfRangeError, tf.errors.CancelledError)


class ThreadError(RuntimeError):
    """An exception raised inside one of the driver's threads (names the thread)."""


class MissingExtraError(ValueError):
    """A setting needs an optional package: the message names our pip extra."""


class LearnerStarvedError(RuntimeError):
    """No learn batch arrived within `learner_queue_timeout`."""


def stop_with_error(coord: tf.train.Coordinator, close_queues: Callable[[], None],
                    error: BaseException) -> None:
    """Records `error` in `coord` (the first recorded wins) and closes the queues.

    Args:
        coord: the coordinator every thread of the driver runs under.
        close_queues: wakes every thread blocked on a queue.
        error: raised here so that the coordinator keeps its traceback.
    """
    try:
        raise error
    except type(error):
        coord.request_stop(sys.exc_info())
    close_queues()
