"""Sampling shapes: what a learn batch cuts from the S segments a table samples.

- `RandomWindows`: one window of n steps from a uniformly drawn start of each
  segment (uniform replay's default: windows start uniformly over the steps).
- `EveryWindow`: all T windows of each segment, item-major (prioritized
  replay, whose item priority then covers all it holds; uniform replay with
  `whole_segments`).
- `WholeSequences`: each segment whole, after its burn-in prefix, from its
  stored policy state (a recurrent learner, R2D2).

A shape knows its items per batch, the trained steps per item (the rate
limiter's unit), the learn batch's `(Q', T', B')` and how to cut it
(`cut`, traced into the table's sampling pipeline).
"""

from typing import Any

import tensorflow as tf

from alf_async.batches.segments import Segment, cut_windows
from alf_async.experience import Unroll


class SamplingShape:
    """A learn batch of `batch_size` trained steps cut from segments of T steps.

    Attributes:
        steps_per_item: steps trained on per sampled item.
        windows_per_item: learn-batch columns per sampled item.
        items_per_batch: S, items sampled per learn batch.
    """

    steps_per_item = 1
    windows_per_item = 1

    def __init__(self, batch_size: int, unroll_length: int):
        if batch_size % self.steps_per_item:
            raise ValueError(
                f"ReplayBuffer.batch_size={batch_size} must be a multiple of "
                f"AsyncOffPolicyDriver.unroll_length={unroll_length} with prioritized "
                f"replay, sequences or whole_segments (each sampled segment gives all its "
                f"steps)")
        self.batch_size, self.unroll_length = batch_size, unroll_length
        self.items_per_batch = batch_size // self.steps_per_item

    def cut(self, segments: Segment) -> Unroll:
        """The learn batch's windows or sequences of `[S, ...]` segments."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> tuple:
        """`(Q', T', B')` of the learn batches."""
        raise NotImplementedError

    def describe(self) -> str:
        """What a learn batch holds, for the console."""
        raise NotImplementedError


class RandomWindows(SamplingShape):
    """`batch_size` segments, one window of `sequence_length` steps from each."""

    def __init__(self, batch_size: int, unroll_length: int, sequence_length: int):
        super().__init__(batch_size, unroll_length)
        self.sequence_length = sequence_length

    def cut(self, segments: Segment) -> Unroll:
        starts = tf.random.uniform([self.batch_size], 0, self.unroll_length, tf.int32)
        return cut_windows(segments, starts, self.sequence_length)

    @property
    def batch_shape(self) -> tuple:
        return self.batch_size, self.sequence_length, 1

    def describe(self) -> str:
        return f"{self.batch_size} windows of {self.sequence_length} steps"


class EveryWindow(RandomWindows):
    """`batch_size / T` segments, each cut into the T windows that start at its steps,
    item-major (item i's window at step t is column `i * T + t`)."""

    def __init__(self, batch_size: int, unroll_length: int, sequence_length: int):
        self.steps_per_item = self.windows_per_item = unroll_length
        super().__init__(batch_size, unroll_length, sequence_length)

    def cut(self, segments: Segment) -> Unroll:
        steps = self.unroll_length
        repeated = tf.nest.map_structure(lambda x: tf.repeat(x, steps, axis=0), segments)
        starts = tf.tile(tf.range(steps), tf.shape(segments.log_prob)[:1])
        return cut_windows(repeated, starts, self.sequence_length)

    def describe(self) -> str:
        if self.windows_per_item == 1:
            return super().describe()
        return (f"{self.items_per_batch} segments x {self.windows_per_item} windows of "
                f"{self.sequence_length} steps")


class WholeSequences(SamplingShape):
    """`batch_size / T` segments, each one sequence of `prefix` burn-in steps and its
    T steps: `[S, prefix + T, 1]`, from the policy state stored before it."""

    def __init__(self, batch_size: int, unroll_length: int, prefix: int,
                 state_structure: Any):
        self.steps_per_item = unroll_length
        super().__init__(batch_size, unroll_length)
        self.prefix, self._state_structure = prefix, state_structure

    def cut(self, segments: Segment) -> Unroll:
        state = tf.nest.pack_sequence_as(  # Reverb gives lists back as tuples
            self._state_structure, tf.nest.flatten(segments.policy_state))
        return cut_windows(segments._replace(policy_state=state),
                           tf.zeros(tf.shape(segments.log_prob)[:1], tf.int32),
                           self.prefix + self.unroll_length)

    @property
    def batch_shape(self) -> tuple:
        return self.items_per_batch, self.prefix + self.unroll_length, 1

    def describe(self) -> str:
        return (f"{self.items_per_batch} sequences of {self.prefix} burn-in + "
                f"{self.unroll_length} steps")
