"""Target networks: slowly moving copies of the networks that bootstrap targets."""

from typing import Sequence

import tensorflow as tf


class TargetUpdater(tf.Module):
    """Moves target variables toward their sources every `period` optimizer steps.

    Each update sets `target = tau * source + (1 - tau) * target`: tau = 1 with
    a period of hundreds of steps is DQN's periodic copy, a small tau every
    step SAC's Polyak averaging. Copies the sources once when built.

    Thread-safety: `step()` is called by the learner's thread only.
    """

    def __init__(self, sources: Sequence[tf.Variable], targets: Sequence[tf.Variable],
                 tau: float, period: int, name: str = "target_updater"):
        super().__init__(name=name)
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} source but {len(targets)} target variables")
        if not 0 < tau <= 1 or period < 1:
            raise ValueError(f"target_update_tau must be in (0, 1] and target_update_period "
                             f">= 1, got {tau} and {period}")
        self._pairs = list(zip(sources, targets))
        self._tau, self._period = tau, period
        self.num_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="num_steps")
        for source, target in self._pairs:
            target.assign(source)

    def step(self) -> None:
        """Counts an optimizer step; updates the targets when the period is up."""
        self.num_steps.assign_add(1)

        def update():
            for source, target in self._pairs:
                target.assign(self._tau * source + (1 - self._tau) * target)
            return tf.constant(True)

        tf.cond(tf.equal(self.num_steps % self._period, 0), update,
                lambda: tf.constant(False))
