"""Priority updates written back off the learner's thread.

The learner's thread hands each update's per-item terms to `PriorityUpdates`
and goes on training; a `PriorityWriterThread` turns everything pending into
priorities and writes them to the table in one `mutate_priorities` call
(later updates of an item win). `write()` in another thread writes what is
pending there, once any write under way is done: a buffer saved after it
holds every update handed over before.
"""

import threading
from typing import Any, Callable, List, Tuple

import numpy as np
import tensorflow as tf

from alf_async.collection.driver_thread import DriverThread


class PriorityUpdates:
    """Pending priority updates of a prioritized replay table.

    Thread-safety: `put()` is called by the learner's thread; `write()` by
    the writer thread and by the thread that saves or closes the table. A
    write holds `_writing` from taking the pending updates until they are
    in the table, so that a `write()` returns only once every update put
    before it is written.
    """

    def __init__(self, priorities_of: Callable[[Any, int], np.ndarray],
                 mutate: Callable[[np.ndarray, np.ndarray], None]):
        """
        Args:
            priorities_of: `(per_item, num_items) -> [S]` priorities of the
                S items of one update (`PrioritizedReplayBatches`' mix).
            mutate: `(keys [N], priorities [N]) -> None`, the table's write.
        """
        self._priorities_of = priorities_of
        self._mutate = mutate
        self._pending: List[Tuple[np.ndarray, Any]] = []
        self._arrived = threading.Condition()
        self._writing = threading.Lock()
        self.written_items = 0  # item priorities written (a summary)

    def put(self, keys: np.ndarray, per_item) -> None:
        """Queues one update: `[S]` item keys and the learner's per-item terms."""
        with self._arrived:
            self._pending.append((keys, per_item))
            self._arrived.notify()

    def write(self, wait_secs: float = 0.0) -> None:
        """Writes every pending update in one table call, once a write under way
        is done; first waits up to `wait_secs` for one if none is pending."""
        with self._writing:
            with self._arrived:
                if not self._pending and wait_secs:
                    self._arrived.wait(wait_secs)
                pending, self._pending = self._pending, []
            if not pending:
                return
            updates = {}  # key -> priority; a later update of an item wins
            for keys, per_item in pending:
                updates.update(zip(keys.tolist(), self._priorities_of(per_item, len(keys))))
                self.written_items += len(keys)
            self._mutate(np.fromiter(updates.keys(), np.uint64, len(updates)),
                         np.fromiter(updates.values(), np.float64, len(updates)))


class PriorityWriterThread(DriverThread):
    """Writes the learner's priority updates to the table as they come."""

    _POLL_SECS = 0.05  # how often a wait for updates checks for a stop

    def __init__(self, name: str, coord: tf.train.Coordinator,
                 close_queues: Callable[[], None], updates: PriorityUpdates):
        super().__init__(name, coord, close_queues)
        self._updates = updates

    def _step(self) -> None:
        self._updates.write(wait_secs=self._POLL_SECS)
