"""`Priorities`: the arithmetic of prioritized replay (Schaul et al.; Ape-X; R2D2).

An item (a segment of T steps) is sampled with probability
`P(i) = p_i^alpha / sum_k p_k^alpha` (Reverb's `Prioritized` selector applies
alpha); its windows are weighted in the loss by the importance-sampling weight
`w_i = (N * P(i))^-beta / max_j w_j` (N: the items in the table; the maximum
over the learn batch), with beta annealed to 1 on a schedule of env steps.
After an update, an item's priority is R2D2's mix of its windows' absolute
TD errors, `eta * max|delta| + (1 - eta) * mean|delta| + eps`.

New items enter at the largest priority so far (Schaul et al.), at 1, or
with their TD errors under the current network computed at insert (Ape-X's
actors compute them while acting; here the writer thread does).

They are written back off the learner's thread: the learner's thread hands
each update's per-item terms to `PriorityUpdates` and goes on training; a
`PriorityWriterThread` turns everything pending into priorities and writes
them to the table in one call (later updates of an item win). `write()` in
another thread writes what is pending there, once any write under way is
done: a buffer saved after it holds every update handed over before.

Thread-safety: `item_priorities` and `new_item_priority` are called by the
priority writer thread (after an update) and the replay writer thread (at
insert): the largest priority seen is a float both write and read (a lost
update only lowers the next new item's priority a little).
"""

import threading
from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from alf_async.algorithms.schedules import Schedule, schedule_value
from alf_async.collection.driver_thread import DriverThread


def _check_unit(name: str, value, low: float = 0.0, high: Optional[float] = 1.0) -> None:
    """Raises ValueError naming the setting unless `low <= value <= high`."""
    number = isinstance(value, (int, float, np.integer, np.floating))
    if not number or value < low or (high is not None and value > high):
        bound = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"PrioritizedReplayBatches.{name} must be {bound}, got {value!r}")


def check_beta(beta: Schedule) -> None:
    """Raises ValueError unless every value of the beta schedule is in [0, 1]."""
    values = [v for _, v in beta] if isinstance(beta, (list, tuple)) else [beta]
    for value in values:
        _check_unit("priority_replay_beta", value)


NEW_ITEMS = ("max", "one", "td_error")  # how new items get their priority


class Priorities:
    """Priorities of new and replayed items, and the loss's importance weights.

    Attributes:
        alpha: the priority exponent of sampling (0: uniform).
        max_priority: the largest priority written so far (new items enter
            with it with `new_items='max'`).
        new_items: how new items get their priority: 'max', 'one' or
            'td_error' (computed at insert by the batch source).
    """

    def __init__(self, alpha: float, beta: Schedule, eps: float, eta: float,
                 new_items: str = "max"):
        """
        Args:
            alpha: sampling exponent, >= 0 (ALF's `priority_replay_alpha`).
            beta: importance-sampling exponent in [0, 1], a constant or
                `[(env_steps, value), ...]` (ALF's `priority_replay_beta`).
            eps: added to every priority, > 0, so that no item is never
                sampled again (ALF's `priority_replay_eps`).
            eta: R2D2's weight of the max over the mean of an item's errors.
            new_items: 'max': new items enter at the largest priority so far
                (Schaul et al.); 'one': at 1; 'td_error': their TD errors,
                mixed like the learner's, computed when they are inserted.

        Raises:
            ValueError: a setting is out of range (names it).
        """
        _check_unit("priority_replay_alpha", alpha, high=None)
        check_beta(beta)
        if not isinstance(eps, (int, float, np.integer, np.floating)) or not eps > 0:
            raise ValueError(f"PrioritizedReplayBatches.priority_replay_eps must be > 0, "
                             f"got {eps!r}")
        _check_unit("priority_replay_eta", eta)
        if new_items not in NEW_ITEMS:
            raise ValueError(f"PrioritizedReplayBatches.new_items must be one of "
                             f"{', '.join(map(repr, NEW_ITEMS))}, got {new_items!r}")
        self.alpha, self._beta, self._eps, self._eta = alpha, beta, eps, eta
        self.new_items = new_items
        self.max_priority = 1.0

    def beta(self, env_steps: int) -> float:
        """Beta at `env_steps` along its schedule."""
        return float(schedule_value(self._beta, env_steps))

    def new_item_priority(self) -> float:
        """The priority a newly inserted item gets without its own ('td_error':
        before the first is computed): the largest so far, or 1 with 'one'."""
        return 1.0 if self.new_items == "one" else self.max_priority

    def weights(self, probability: np.ndarray, table_size: np.ndarray,
                env_steps: int) -> np.ndarray:
        """Importance weights `(N * P(i))^-beta`, normalised by their batch maximum.

        Args:
            probability: `[S]` sampling probabilities of the sampled items.
            table_size: `[S]` items in the table when each was sampled.
            env_steps: where the beta schedule is read.

        Returns:
            `[S]` float32 weights in (0, 1].
        """
        scaled = np.asarray(table_size, np.float64) * np.asarray(probability, np.float64)
        weights = np.power(np.maximum(scaled, 1e-12), -self.beta(env_steps))
        return (weights / weights.max()).astype(np.float32)

    def item_priorities(self, errors: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Each item's new priority from its windows' absolute errors.

        Args:
            errors: `[S, K]` absolute TD errors of the K transitions learned
                from each of S items.
            mask: `[S, K]`, 1 where a transition was learned from (steps
                after an episode's end in a window are not).

        Returns:
            `[S]` priorities `eta * max + (1 - eta) * mean + eps` over the
            masked errors (`eps` alone for an item with none).
        """
        errors = np.abs(np.asarray(errors, np.float64)) * mask
        count = mask.sum(axis=1)
        mean = errors.sum(axis=1) / np.maximum(count, 1)
        mixed = self._eta * errors.max(axis=1) + (1 - self._eta) * mean + self._eps
        self.max_priority = max(self.max_priority, float(mixed.max()))
        return mixed


    def window_priorities(self, per_item: dict, num_items: int,
                          windows_per_item: int) -> np.ndarray:
        """`[S]` item priorities from the per-window terms of S items' windows.

        Args:
            per_item: `{"td_error": [K, S * W], "mask": [K, S * W]}`: K samples
                per window, window `i * W + w` the w-th of item i.
            num_items: S.
            windows_per_item: W (a sequence: 1, its K the trained steps).
        """
        def by_item(x):  # [K, S * W] -> [S, W * K]
            x = np.asarray(x).reshape(-1, num_items, windows_per_item)
            return np.moveaxis(x, 1, 0).reshape(num_items, -1)

        return self.item_priorities(by_item(per_item["td_error"]), by_item(per_item["mask"]))


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
