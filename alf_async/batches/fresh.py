"""`FreshBatches`: learn batches of new unrolls (ALF's `exp_replayer='one_time'`)."""

from typing import Callable, Optional, Sequence

import gin
import numpy as np
import tensorflow as tf

from alf_async.experience import LearnBatch
from alf_async.collection.pacing import FreeRunning
from alf_async.batches.mixin import UnrollReplay


def num_replayed(replay_proportion: float, learn_queue_cap: int) -> int:
    """Replayed unrolls per learn batch; raises ValueError unless a whole number."""
    replayed = replay_proportion * learn_queue_cap
    if replay_proportion < 0 or abs(replayed - round(replayed)) > 1e-6:
        raise ValueError(
            f"FreshBatches.replay_proportion * AsyncOffPolicyDriver.learn_queue_cap must be "
            f"a whole number >= 0 (unrolls replayed per learn batch), got "
            f"{replay_proportion} * {learn_queue_cap}")
    return int(round(replayed))


@gin.configurable(module="alf_async")
class FreshBatches:
    """Each learn batch is the next Q unrolls of the learn queue.

    Options: unrolls acted on by weights more than `max_policy_lag` updates
    old are replaced by newer ones; `replay_proportion * Q` unrolls replayed
    from recent ones are appended (IMPALA's mix-in); in deterministic mode
    every env is let run `Q / E` unrolls (its permits) for each batch, and
    the batch holds them in env order.

    Thread-safety: `next()` is called by one thread at a time.
    """

    weighted = False  # no importance weights
    learns_from_env = True
    wants_back = ()  # fresh unrolls are used once

    def __init__(self, take: Callable[[int], object], version: tf.Variable,
                 learn_queue_cap: int, permits: Sequence = (), pace=FreeRunning(),
                 seed: Optional[int] = None,
                 max_policy_lag: Optional[int] = None, replay_proportion: float = 0.0,
                 replay_buffer_num_slots: int = 0):
        """
        Args:
            take: `n -> Unroll` with `[n, T, B, ...]` leaves (`Collector.take`).
            version: int64 scalar variable, the learner's update count.
            learn_queue_cap: Q, new unrolls per learn batch.
            permits: each env's unroll-permit queue (with `Lockstep`).
            pace: `pacing.FreeRunning` (the next Q unrolls) or
                `pacing.Lockstep` (each env's share, in env order).
            seed: seeds the mix-in replay's sampling.
            max_policy_lag: unrolls with a step acted on by weights more than
                this many learner updates old are dropped (and counted in
                `dropped_unrolls`). None: keep all.
            replay_proportion: p; each learn batch of Q new unrolls gets
                `p * Q` unrolls replayed from recent ones appended (p:1).
            replay_buffer_num_slots: unrolls kept for that replay.
        """
        self._take, self._version = take, version
        self._learn_queue_cap = learn_queue_cap
        self._permits, self._pace = list(permits), pace
        self._max_policy_lag = max_policy_lag
        self._num_replayed = num_replayed(replay_proportion, learn_queue_cap)
        self._replay = (UnrollReplay(replay_buffer_num_slots, seed)
                        if self._num_replayed else None)
        self.dropped_unrolls = 0

    def shape(self, unroll_length: int, batch_size: int) -> tuple:
        """`(Q', T, B)`: Q new unrolls plus the replayed ones, each `[T, B]`."""
        return self._learn_queue_cap + self._num_replayed, unroll_length, batch_size

    @staticmethod
    def threads(unused_coord, unused_queues) -> list:
        return []

    def next(self, updates_ahead: int = 0) -> LearnBatch:
        """The next learn batch: experience `[Q', T, B, ...]`, bootstrap `[Q', B, ...]`.

        `updates_ahead`: how many learner updates later the batch will be
        trained on; `max_policy_lag` counts the lag at that update.

        Raises:
            ThreadError, RuntimeError: from `take` (a thread failed; stopped).
        """
        unrolls = self._pace.take(self._take, self._learn_queue_cap, self._permits)
        if self._max_policy_lag is not None:
            unrolls = self._drop_stale(unrolls, updates_ahead)
        new_steps = int(np.prod(unrolls.experience.policy_version.shape))  # Q * T * B
        if self._replay is not None:
            self._replay.add(unrolls)
            unrolls = tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), unrolls,
                                            self._replay.sample(self._num_replayed))
        return LearnBatch(unrolls.experience, unrolls.bootstrap, unrolls.env_id, new_steps)

    def _drop_stale(self, unrolls, updates_ahead: int):
        """Replaces unrolls older than `max_policy_lag` updates (at the update
        `updates_ahead` from now) by newer ones."""
        while True:
            oldest = tf.reduce_min(unrolls.experience.policy_version, axis=[1, 2])
            now = self._version.read_value() + updates_ahead
            fresh = now - oldest <= self._max_policy_lag
            stale = int(tf.reduce_sum(tf.cast(~fresh, tf.int32)))
            if not stale:
                return unrolls
            self.dropped_unrolls += stale
            kept = tf.nest.map_structure(lambda x: tf.boolean_mask(x, fresh), unrolls)
            unrolls = tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), kept,
                                            self._take(stale))

    def after_update(self, batch, per_item) -> None:
        """Fresh unrolls are used once: nothing to hear back."""

    def describe(self, env_steps: int) -> str:
        return f"{env_steps} frames"

    def summaries(self) -> dict:
        return {"learner/dropped_unrolls": self.dropped_unrolls}

    @staticmethod
    def diagnose() -> str:
        return ""

    def save(self) -> None:
        """Nothing is kept beside the checkpoint."""

    def close(self) -> None:
        """Nothing to release."""
