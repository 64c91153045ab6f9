"""`UnrollReplay`: IMPALA's mix-in replay of recent unrolls (`FreshBatches`' option)."""

from typing import Optional

import numpy as np
import tensorflow as tf

from alf_async.experience import Unroll


class UnrollReplay:
    """A ring of the `num_slots` most recent unrolls, sampled uniformly.

    IMPALA-style mix-in replay: each learn batch of Q new unrolls gets
    `round(proportion * Q)` replayed ones appended; off-policy corrections
    (V-trace, PPO's ratio to the behaviour log-probs) account for their age.

    Thread-safety: used by one thread (whichever assembles learn batches).
    """

    def __init__(self, num_slots: int, seed: Optional[int] = None):
        """
        Args:
            num_slots: most unrolls kept; the oldest is overwritten first.
            seed: seeds the sampling (None: random).
        """
        if num_slots < 1:
            raise ValueError(f"FreshBatches.replay_buffer_num_slots must be >= 1 "
                             f"when replay_proportion > 0, got {num_slots}")
        self._slots = []
        self._num_slots = num_slots
        self._next = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, unrolls: Unroll) -> None:
        """Stores each of `[n, ...]` unrolls (any nest) in its own slot."""
        for i in range(int(tf.nest.flatten(unrolls)[0].shape[0])):
            unroll = tf.nest.map_structure(lambda x, i=i: x[i], unrolls)
            if len(self._slots) < self._num_slots:
                self._slots.append(unroll)
            else:
                self._slots[self._next] = unroll
            self._next = (self._next + 1) % self._num_slots

    def sample(self, n: int) -> Unroll:
        """`n` stored unrolls drawn uniformly with replacement, leaves `[n, ...]`."""
        if not self._slots:
            raise ValueError("UnrollReplay.sample() before any add()")
        picks = self._rng.integers(len(self._slots), size=n)
        return tf.nest.map_structure(lambda *xs: tf.stack(xs),
                                     *[self._slots[i] for i in picks])
