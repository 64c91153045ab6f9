"""`PrioritizedReplayBatches`: learn batches sampled by priority (Ape-X, R2D2), with the
learner's TD errors written back as the sampled items' priorities."""

from typing import Callable, List, Optional

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from alf_async.algorithms.contract import per_item_terms
from alf_async.batches.priorities import Priorities, PriorityUpdates, PriorityWriterThread
from alf_async.batches.segments import Segment
from alf_async.batches.uniform import UniformReplayBatches
from alf_async.experience import LearnBatch
from alf_async.algorithms.schedules import Schedule


@gin.configurable(module="alf_async")
class PrioritizedReplayBatches:
    """Prioritized replay (`exp_replayer='prioritized'`) in a `ReplayBuffer`.

    Each learn batch is `batch_size / T` segments drawn with probability
    `p^alpha / sum p^alpha`, each cut into the T windows starting at its
    steps (item-major); every window's samples are weighted in the loss by
    the segment's importance weight (`Priorities.weights`). After the update
    the learner's absolute TD errors (the algorithm's `td_error` item term)
    of a segment's windows become its priority (`Priorities.item_priorities`),
    R2D2's mix of max and mean; for a recurrent learner a segment is one
    sequence and its trained steps' errors are mixed the same way. Written
    back with the table's `update_priorities`. New segments enter at the
    largest priority so far, or (`new_items='td_error'`, Ape-X) with the
    same mix of their TD errors under the current network, computed by the
    writer thread as it inserts them. The table's sizes and replay ratio are
    `ReplayBuffer`'s settings; with `ReplayBuffer.save_buffer` the priorities
    are saved and restored with the items, and beta follows the learner's env
    steps (checkpointed), so both survive a restart.

    It is a `UniformReplayBatches` (the windows, the writer thread) given the
    priorities, with importance weights on every batch and the port back.

    Thread-safety: as `UniformReplayBatches`; `after_update()` is called by
    the trainer's thread while the prefetch thread may sample and the
    priority writer thread writes the previous updates, and with
    'td_error' the writer thread runs the algorithm's loss (reading the
    variables as the acting threads do) while the learner trains.
    """

    NAME = "prioritized"
    weighted = True  # each window's importance weight, [batch_size, 1]
    learns_from_env = True
    wants_back = ("td_error",)  # the algorithm's absolute TD errors: new priorities

    def __init__(self, unroll_spec, algorithm, should_stop: Callable[[], bool],
                 env_steps: Callable[[], int], replay_dir: Optional[str] = None,
                 priority_replay_alpha: float = 0.6,
                 priority_replay_beta: Schedule = ((0, 0.4), (100_000, 1.0)),
                 priority_replay_eps: float = 1e-6,
                 priority_replay_eta: float = 0.9,
                 new_items: str = "max"):
        """
        Args:
            unroll_spec: spec of one unroll (`[T, B, ...]` leaves).
            algorithm: with `td_error` among its `item_terms` (DQN, R2D2,
                SAC); a recurrent one learns from sequences.
            should_stop: ends a wait for samples (the coordinator's).
            env_steps: `() -> int`, the learner's env steps (beta's schedule).
            replay_dir: where a `ReplayBuffer` with `save_buffer` keeps its
                content, priorities included.
            priority_replay_alpha: sampling exponent alpha >= 0 (0: uniform).
            priority_replay_beta: importance-weight exponent in [0, 1], a
                constant or `[(env_steps, value), ...]` annealed to 1.
            priority_replay_eps: added to every priority (> 0).
            priority_replay_eta: R2D2's mix of a segment's errors, in [0, 1]:
                `eta * max + (1 - eta) * mean`.
            new_items: a new segment's priority: 'max', the largest so far;
                'td_error', its windows' TD errors under the current network
                (a forward pass when inserted, mixed as after an update);
                'one': 1.

        Raises:
            ValueError: a setting is out of range (names it).
        """
        self.priorities = Priorities(priority_replay_alpha, priority_replay_beta,
                                     priority_replay_eps, priority_replay_eta, new_items)
        self._algorithm = algorithm
        self._insert_terms = tf.function(self._td_errors, autograph=False)
        self._sampled = UniformReplayBatches(
            unroll_spec, algorithm, should_stop, replay_dir, self.priorities,
            self._computed_priorities if new_items == "td_error" else None)
        self.replay = self._sampled.replay
        self._env_steps = env_steps
        self._updates = PriorityUpdates(self._item_priorities,
                                        self.replay.table.update_priorities)

    def shape(self, unroll_length: int, batch_size: int) -> tuple:
        """`(Q', T', 1)`, as uniform replay's."""
        return self._sampled.shape(unroll_length, batch_size)

    def threads(self, coord: tf.train.Coordinator, queues) -> list:
        """The replay writer thread, and the thread that writes priorities back."""
        return [*self._sampled.threads(coord, queues),
                PriorityWriterThread("PriorityWriterThread", coord, queues.close_all,
                                     self._updates)]

    def next(self, updates_ahead: int = 0) -> Optional[LearnBatch]:
        """A learn batch of every window of `batch_size / T` sampled segments, with
        `weights` `[batch_size, 1]` (each window its segment's); None once stopped."""
        batch = self._sampled.next(updates_ahead)
        if batch is None:
            return None
        items = batch.items
        weights = self.priorities.weights(items.probability, items.table_size,
                                          self._env_steps())
        per_window = np.repeat(weights, self.replay.windows_per_item)[:, None]
        return batch._replace(weights=tf.constant(per_window))

    def after_update(self, batch, per_item) -> None:
        """Hands each sampled segment's TD errors to the priority writer thread, which
        writes its new priority from them (`write_priorities()` does it here).

        Args:
            batch: the trained `DeviceBatch`; `batch.items` its `SampledItems`.
            per_item: `{"td_error": [K, S * W], "mask": [K, S * W]}`: K
                samples per window, W = T windows per segment (a sequence:
                W = 1, its K = T trained steps); empty after a skipped update.
        """
        if per_item:
            self._updates.put(batch.items.keys, per_item)

    def write_priorities(self) -> None:
        """Writes every update handed over so far (once one under way is written)."""
        self._updates.write()

    def _item_priorities(self, per_item, num_items: int) -> np.ndarray:
        """`[S]` priorities from `{"td_error", "mask"}` `[K, S * W]`."""
        return self.priorities.window_priorities(per_item, num_items,
                                                 self.replay.windows_per_item)

    def _computed_priorities(self, segments: List[Segment]) -> np.ndarray:
        """`[S]` priorities of new segments from their TD errors (writer thread)."""
        if not segments:
            return np.zeros([0])
        windows = self.replay.windows(segments)
        terms = self._insert_terms(windows.experience, windows.bootstrap)
        return self._item_priorities({k: v.numpy() for k, v in terms.items()}, len(segments))

    def _td_errors(self, experience, bootstrap):
        """`{"td_error", "mask"}` `[K, columns]` of windows `[columns, T', 1, ...]`."""
        samples = self._algorithm.preprocess(experience, bootstrap)
        return per_item_terms(self._algorithm, samples, tf.shape(experience.log_prob)[0],
                              self.wants_back)

    def diagnose(self) -> str:
        return self._sampled.diagnose()

    def describe(self, unused_env_steps: int) -> str:
        replay = self.replay
        return (f"prioritized replay (alpha {self.priorities.alpha:g}) at "
                f"{replay.replay_ratio:g} windows per env step: {replay.describe_batch()}")

    def summaries(self) -> dict:
        return {**self._sampled.summaries(),
                "replay/priority_beta": self.priorities.beta(self._env_steps()),
                "replay/max_priority": self.priorities.max_priority,
                "replay/priority_updates": self._updates.written_items}

    def save(self) -> None:
        """With `ReplayBuffer.save_buffer`, saves the buffer with every priority
        handed over so far."""
        self.write_priorities()
        self._sampled.save()

    def close(self) -> None:
        """Writes the priorities handed over (a buffer saved at close holds them),
        then closes the table; a write that fails (the writer thread's error is
        already the driver's) is logged, and the table closed all the same."""
        try:
            self.write_priorities()
        except Exception as error:  # pylint: disable=broad-except
            logging.warning("PrioritizedReplayBatches: the last priority updates were not "
                            "written: %s", error)
        self._sampled.close()
