"""`DriverThread`: the base of every thread the driver runs.

Each runs its loop until the coordinator asks to stop. A thread that fails
stops the coordinator with a `ThreadError` naming itself and closes every
queue (`alf_async.errors.stop_with_error`), so that no other thread stays
blocked; `AsyncOffPolicyDriver.stop()` then re-raises that error.

With `driver_thread_niceness` (gin) above 0, each runs at that much lower
a scheduling priority than the thread that built it (Linux): where the
learner is the bottleneck, its thread goes first when both want a core.
"""

import os
import sys
import threading
import traceback
from typing import Callable, List, Sequence

import gin
import tensorflow as tf
from absl import logging

from alf_async.errors import QUEUE_CLOSED, ThreadError, stop_with_error


def to_numpy(nest):
    """A nest of eager tensors as numpy arrays."""
    return tf.nest.map_structure(lambda t: t.numpy(), nest)


def live_driver_threads() -> List[threading.Thread]:
    """Every `DriverThread` still running in this process (leak checks use it)."""
    return [t for t in threading.enumerate() if isinstance(t, DriverThread)]


def where_threads_are(threads: Sequence[threading.Thread]) -> str:
    """The Python stacks of the live threads of `threads`, for a stop that timed out,
    and of the TensorFlow threads running Python now (an env step in
    `tf.numpy_function` runs on one of those, not on its env thread)."""
    frames = sys._current_frames()  # pylint: disable=protected-access
    python_threads = {t.ident for t in threading.enumerate()
                      if not isinstance(t, threading._DummyThread)}  # pylint: disable=protected-access
    stacks = [(t.name, frames[t.ident]) for t in threads
              if t.is_alive() and t.ident in frames]
    stacks += [("a TensorFlow thread running Python", frame)
               for ident, frame in frames.items() if ident not in python_threads]
    return "\n".join(f"{name}:\n{''.join(traceback.format_stack(frame))}"
                     for name, frame in stacks)


@gin.configurable(module="alf_async")
def driver_thread_niceness(niceness: int = 0) -> int:
    """How much lower the driver's threads are scheduled than the learner's.

    Args:
        niceness: added to each `DriverThread`'s nice value when it starts
            (Linux; elsewhere a warning and no change). 0: no change.

    Returns:
        `niceness`.

    Raises:
        ValueError: `niceness` outside [0, 19] (one line naming the setting).
    """
    if not isinstance(niceness, int) or not 0 <= niceness <= 19:
        raise ValueError(f"driver_thread_niceness.niceness must be an integer in [0, 19], "
                         f"got {niceness!r}")
    return niceness


def lower_this_thread(niceness: int) -> None:
    """Adds `niceness` to the calling thread's nice value (threads it starts
    later inherit it); a no-op at 0, a warning off Linux."""
    if not niceness:
        return
    if not sys.platform.startswith("linux"):  # there PRIO_PROCESS would name a process
        logging.warning("driver_thread_niceness.niceness=%d not applied: per-thread "
                        "priorities need Linux", niceness)
        return
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid)
                                               + niceness))


class DriverThread(threading.Thread):
    """Runs `_step()` in a loop under a `tf.train.Coordinator`.

    It starts by lowering its own priority by `driver_thread_niceness()`. A closed queue while a stop is requested is a clean exit; any other
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
        self._niceness = driver_thread_niceness()

    def run(self) -> None:
        try:
            lower_this_thread(self._niceness)
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
