"""The errors training stops with, and how a failing thread reports one.

Every thread of the driver (and the learner loop's prefetch thread) fails
the same way: it records a `ThreadError` naming itself in the shared
`tf.train.Coordinator`, then closes the queues so that no other thread stays
blocked. The first error recorded is the one `AsyncOffPolicyDriver.stop()`
and `get_training_exps()` re-raise; `python -m alf_async.train` exits with 1
and prints it.
"""

import contextlib
import logging
import sys
import threading
import time
from typing import Callable, Tuple

import tensorflow as tf

from alf_async.extras import MissingExtraError  # noqa: F401  (its home: light, no TensorFlow)

QUEUE_CLOSED = (tf.errors.OutOfRangeError, tf.errors.CancelledError)


class ThreadError(RuntimeError):
    """An exception raised inside one of the driver's threads (names the thread)."""


class DriverStopped(RuntimeError):
    """The driver was stopped (or asked to stop) while a learn batch was awaited."""

    def __init__(self):
        super().__init__("AsyncOffPolicyDriver was stopped")


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


class _Alarms:
    """One daemon thread that calls each armed alarm's function once its time is up.

    The learner arms an alarm around every wait for data (a starvation
    watchdog, a stall warning): a `threading.Timer` each time started a thread
    per learner iteration, about 1 ms of a busy 2-core machine's time
    (`tools/datasets_benchmark.py`). Arming here takes a lock; the thread is
    woken only for an alarm due before its next planned wake-up.

    Thread-safety: `arm()` and `disarm()` from any thread.
    """

    IDLE_SECS = 1.0  # the thread's longest sleep

    def __init__(self):
        self._cond = threading.Condition()
        self._due = {}  # token -> (deadline, fire, args)
        self._wake_at = float("inf")  # when the thread wakes next
        self._next_token = 0
        self._thread = None

    def arm(self, seconds: float, fire: Callable, args) -> int:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="alarms", daemon=True)
                self._thread.start()
            self._next_token += 1
            deadline = time.monotonic() + seconds
            self._due[self._next_token] = (deadline, fire, args)
            if deadline < self._wake_at:
                self._cond.notify()
            return self._next_token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._due.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                fired = [token for token, (deadline, _, _) in self._due.items()
                         if deadline <= now]
                calls = [self._due.pop(token)[1:] for token in fired]
                if not calls:
                    self._wake_at = min([d for d, _, _ in self._due.values()]
                                        + [now + self.IDLE_SECS])
                    self._cond.wait(self._wake_at - now)
                    continue
            for fire, args in calls:  # outside the lock: a call may arm or disarm
                try:
                    fire(*args)
                except Exception:  # pylint: disable=broad-except
                    logging.exception("An alarm's call failed")


_ALARMS = _Alarms()


@contextlib.contextmanager
def fires_after(seconds: float, fire: Callable, *args):
    """Calls `fire(*args)` from the alarm thread if the block lasts `seconds`."""
    token = _ALARMS.arm(seconds, fire, args)
    try:
        yield
    finally:
        _ALARMS.disarm(token)


class StarvationWatchdog:
    """Fails a wait for a learn batch that takes longer than `timeout` seconds.

    Thread-safety: `guard()` is entered by one thread at a time (the one
    taking learn batches); the failure is reported from a timer thread.
    """

    def __init__(self, timeout: float, fail: Callable[[BaseException], None],
                 diagnose: Callable[[], str]):
        """
        Args:
            timeout: seconds a wait may take (`learner_queue_timeout`).
            fail: stops the driver with the `LearnerStarvedError` given.
            diagnose: `() -> str`, one line on every stage of the pipeline,
                read when the time is up.
        """
        self._timeout = timeout
        self._fail = fail
        self._diagnose = diagnose

    def guard(self):
        """Fails the driver with `LearnerStarvedError` if the block takes too long."""
        return fires_after(self._timeout, self._starved)

    def _starved(self) -> None:
        self._fail(LearnerStarvedError(f"No learn batch within learner_queue_timeout="
                                       f"{self._timeout}s: {self._diagnose()}"))


def protocol_members(protocol: type) -> Tuple[str, ...]:
    """The public members a `typing.Protocol` declares: its annotated attributes and
    its methods, in declaration order."""
    names = list(getattr(protocol, "__annotations__", {}))
    names += [name for name, value in vars(protocol).items()
              if callable(value) and not name.startswith("_") and name not in names]
    return tuple(names)


def check_contract(component, protocol: type, kind: str) -> None:
    """Raises TypeError naming every member of `protocol` that `component` lacks.

    Args:
        component: an algorithm, a collection, a batch source, ...
        protocol: the `typing.Protocol` it must follow.
        kind: what it is, for the message (`an alf_async algorithm`).
    """
    missing = [name for name in protocol_members(protocol) if not hasattr(component, name)]
    if missing:
        raise TypeError(f"{type(component).__name__} is not {kind}: it lacks "
                        f"{', '.join(missing)} (see {protocol.__module__}.{protocol.__name__})")
