"""Segments: the items replay buffers store, and the windows cut from them.

A `Segment` is one sub-env's column of a `[T, B]` unroll (T steps and the
bootstrap step after them); `cut_windows` cuts learn windows of n steps from
sampled segments. For a recurrent policy, `SequenceSplitter` prefixes each
segment with the last steps of the same sub-env's previous one (R2D2's
overlapping sequences: the prefix is the burn-in), and the learner gets whole
segments, each from the policy state stored with its first step.
"""

from typing import Any, Dict, List, NamedTuple, Tuple

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.experience import Experience, Unroll


class Segment(NamedTuple):
    """One sub-env's column of an unroll: the item a `ReplayBuffer` stores.

    `time_step` leaves are `[T + 1, ...]` (the unroll's T steps, then its
    bootstrap); `action`, `log_prob` and `policy_version` leaves `[T, ...]`;
    `env_id` is a scalar; `policy_state` the policy's state before the
    segment's first step (`()` for a feed-forward policy).
    """
    time_step: Any
    action: Any
    log_prob: Any
    policy_version: Any
    env_id: Any
    policy_state: Any = ()


def segment_spec(unroll_spec: Unroll, prefix: int = 0) -> Segment:
    """The spec of one `Segment` of unrolls with spec `unroll_spec` (`[T, B, ...]`),
    `prefix` steps longer with `SequenceSplitter`."""
    experience = unroll_spec.experience
    column = lambda s, extra=0: tf.TensorSpec([s.shape[0] + prefix + extra, *s.shape[2:]],
                                              s.dtype)
    return Segment(tf.nest.map_structure(lambda s: column(s, 1), experience.time_step),
                   tf.nest.map_structure(column, experience.action),
                   column(experience.log_prob), column(experience.policy_version),
                   unroll_spec.env_id,
                   tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[2:], s.dtype),
                                         experience.policy_state))


def unroll_segments(unroll: Unroll) -> List[Segment]:
    """Splits a numpy `Unroll` (`[T, B, ...]` leaves) into its B `Segment`s."""
    experience = unroll.experience
    time_steps = tf.nest.map_structure(lambda x, last: np.concatenate([x, last[None]]),
                                       experience.time_step, unroll.bootstrap)
    column = lambda b: lambda x: x[:, b]
    return [Segment(tf.nest.map_structure(column(b), time_steps),
                    tf.nest.map_structure(column(b), experience.action),
                    experience.log_prob[:, b], experience.policy_version[:, b],
                    np.asarray(unroll.env_id, np.int32),
                    tf.nest.map_structure(lambda x, b=b: x[0, b], experience.policy_state))
            for b in range(experience.log_prob.shape[1])]


def stack_segments(segments: List[Segment]) -> Segment:
    """S numpy `Segment`s -> one whose leaves are `[S, ...]` (as a sampled batch's)."""
    return tf.nest.map_structure(lambda *leaves: np.stack(leaves), *segments)


class SequenceSplitter:
    """Splits unrolls into segments that start with the last `prefix` steps of the
    same sub-env's previous segment (R2D2's sequences overlapping by the burn-in).

    A segment of `prefix + T` steps (and its bootstrap) carries the policy
    state before its first, prefixed step, so that a learner can burn the
    prefix in from the state the actor had and train on the T new steps:
    every collected step is trained on in exactly one sequence. The first
    unroll of a sub-env (a stream: env id and column) has no previous steps:
    it only provides the next one's prefix. With `prefix` 0 the segments are
    `unroll_segments`'.

    Thread-safety: one thread splits (the replay's inserting thread).
    """

    def __init__(self, prefix: int):
        self.prefix = prefix
        self._tails: Dict[Tuple[int, int], Segment] = {}

    def split(self, unroll: Unroll) -> List[Segment]:
        """A numpy unroll's prefixed segments (fewer than B for new streams)."""
        segments = unroll_segments(unroll)
        if not self.prefix:
            return segments
        joined = []
        for b, segment in enumerate(segments):
            key = (int(unroll.env_id), b)
            tail = self._tails.get(key)
            self._tails[key] = self._tail(segment, unroll.experience.policy_state, b)
            if tail is not None:
                joined.append(_join(tail, segment))
        return joined

    def _tail(self, segment: Segment, policy_state, b: int) -> Segment:
        """The segment's last `prefix` steps (no bootstrap), with the state before them."""
        start, stop = -self.prefix - 1, -1
        steps = lambda x: x[-self.prefix:]
        return Segment(tf.nest.map_structure(lambda x: x[start:stop], segment.time_step),
                       tf.nest.map_structure(steps, segment.action), steps(segment.log_prob),
                       steps(segment.policy_version), segment.env_id,
                       tf.nest.map_structure(lambda x: x[-self.prefix, b], policy_state))


def _join(tail: Segment, segment: Segment) -> Segment:
    """`tail`'s steps, then `segment`'s; the state before `tail`."""
    joined = tf.nest.map_structure(lambda x, y: np.concatenate([x, y]), tail[:4], segment[:4])
    return Segment(*joined, segment.env_id, tail.policy_state)


def cut_windows(segments: Segment, starts, length: int) -> Unroll:
    """Windows of `length` steps from `[S, T (+ 1), ...]` segments, as `[S, length, 1]` unrolls.

    Window s holds steps `starts[s] ... starts[s] + length - 1` of segment s
    and, as its bootstrap, the step after them; each is one unroll of one
    sub-env (B = 1). A window may start at any of the T steps: one that runs
    past the segment ends at the segment's bootstrap step, marked LAST where
    it is not the window's bootstrap, so that returns stop there and the
    padding steps after it (copies) are masked like steps after an episode.
    Each window's `policy_state` (`[S, length, 1, ...]`) is its segment's
    stored state (meaningful at a start 0 only: recurrent learners take whole
    segments).
    """
    num_steps = tf.shape(segments.log_prob)[1]
    rows = starts[:, None] + tf.range(length + 1)[None]  # [S, length + 1]
    take = lambda x, rows: tf.gather(x, rows, batch_dims=1)
    time_steps = tf.nest.map_structure(lambda x: take(x, tf.minimum(rows, num_steps)),
                                       segments.time_step)
    cut = (rows >= num_steps) & (tf.range(length + 1) < length)[None]
    time_steps = time_steps._replace(step_type=tf.where(
        cut, tf.cast(ts.StepType.LAST, time_steps.step_type.dtype), time_steps.step_type))
    step_rows = tf.minimum(rows[:, :length], num_steps - 1)
    unroll = lambda x: take(x, step_rows)[:, :, None]  # [S, length, 1, ...]
    experience = Experience(
        tf.nest.map_structure(lambda x: x[:, :length, None], time_steps),
        tf.nest.map_structure(unroll, segments.action), unroll(segments.log_prob),
        tf.nest.map_structure(lambda x: tf.repeat(x[:, None, None], length, axis=1),
                              segments.policy_state),
        unroll(segments.policy_version))
    bootstrap = tf.nest.map_structure(lambda x: x[:, length, None], time_steps)
    return Unroll(experience, bootstrap, segments.env_id)
