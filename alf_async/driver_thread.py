"""`DriverThread`: the base of every thread the driver runs.

Each runs its loop until the coordinator asks to stop. A thread that fails
stops the coordinator with a `ThreadError` naming itself and closes every
queue (`alf_async.errors.stop_with_error`), so that no other thread stays
blocked; `AsyncOffPolicyDriver.stop()` then re-raises that error.
"""

import threading
from typing import Callable, List

import tensorflow as tf

from alf_async.errors import QUEUE_CLOSED, ThreadError, stop_with_error


def to_numpy(nest):
    """A nest of eager tensors as numpy arrays."""
    return tf.nest.map_structure(lambda t: t.numpy(), nest)


def live_driver_threads() -> List[threading.Thread]:
    """Every `DriverThread` still running in this process (leak checks use it)."""
    return [t for t in threading.enumerate() if isinstance(t, DriverThread)]


class DriverThread(threading.Thread):
    """Runs `_step()` in a loop under a `tf.train.Coordinator`.

    A closed queue while a stop is requested is a clean exit; any other
    exception stops the coordinator with a `ThreadError` naming the thread.
    """

    def __init__(self, name: str, coord: tf.train.Coordinator,
                 close_queues: Callable[[], None]):
        """
        Args:
            name: the thread's name, used in its errors.
            coord: the coordinator of all of the driver's threads.
            close_queues: wakes every thread blocked on a queue (on failure).
        """
        super().__init__(name=name, daemon=True)
        self._coord = coord
        self._close_queues = close_queues

    def run(self) -> None:
        try:
            while not self._coord.should_stop():
                self._step()
        except QUEUE_CLOSED as error:
            if not self._coord.should_stop():
                self._fail(error)
        except Exception as error:  # pylint: disable=broad-except
            self._fail(error)

    def _step(self) -> None:
        raise NotImplementedError

    def prepare(self) -> None:
        """Compiles the thread's TF functions; called before `start()`.

        Tracing takes seconds and cannot be interrupted: doing it up front
        keeps `stop()` prompt even right after `start()`.
        """

    def _fail(self, error: Exception) -> None:
        failure = ThreadError(f"{self.name} failed: {type(error).__name__}: {error}")
        failure.__cause__ = error
        stop_with_error(self._coord, self._close_queues, failure)
