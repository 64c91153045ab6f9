"""Segments: the items replay buffers store, and the windows cut from them.

A `Segment` is one sub-env's column of a `[T, B]` unroll (T steps and the
bootstrap step after them); `cut_windows` cuts learn windows of n steps from
sampled segments.
"""

from typing import Any, List, NamedTuple

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.experience import Experience, Unroll


class Segment(NamedTuple):
    """One sub-env's column of an unroll: the item a `ReplayBuffer` stores.

    `time_step` leaves are `[T + 1, ...]` (the unroll's T steps, then its
    bootstrap); `action`, `log_prob` and `policy_version` leaves `[T, ...]`;
    `env_id` is a scalar.
    """
    time_step: Any
    action: Any
    log_prob: Any
    policy_version: Any
    env_id: Any


def segment_spec(unroll_spec: Unroll) -> Segment:
    """The spec of one `Segment` of unrolls with spec `unroll_spec` (`[T, B, ...]`)."""
    experience = unroll_spec.experience
    column = lambda s, extra=0: tf.TensorSpec([s.shape[0] + extra, *s.shape[2:]], s.dtype)
    return Segment(tf.nest.map_structure(lambda s: column(s, 1), experience.time_step),
                   tf.nest.map_structure(column, experience.action),
                   column(experience.log_prob), column(experience.policy_version),
                   unroll_spec.env_id)


def unroll_segments(unroll: Unroll) -> List[Segment]:
    """Splits a numpy `Unroll` (`[T, B, ...]` leaves) into its B `Segment`s."""
    experience = unroll.experience
    time_steps = tf.nest.map_structure(lambda x, last: np.concatenate([x, last[None]]),
                                       experience.time_step, unroll.bootstrap)
    column = lambda b: lambda x: x[:, b]
    return [Segment(tf.nest.map_structure(column(b), time_steps),
                    tf.nest.map_structure(column(b), experience.action),
                    experience.log_prob[:, b], experience.policy_version[:, b],
                    np.asarray(unroll.env_id, np.int32))
            for b in range(experience.log_prob.shape[1])]


def cut_windows(segments: Segment, starts, length: int) -> Unroll:
    """Windows of `length` steps from `[S, T (+ 1), ...]` segments, as `[S, length, 1]` unrolls.

    Window s holds steps `starts[s] ... starts[s] + length - 1` of segment s
    and, as its bootstrap, the step after them; each is one unroll of one
    sub-env (B = 1). A window may start at any of the T steps: one that runs
    past the segment ends at the segment's bootstrap step, marked LAST where
    it is not the window's bootstrap, so that returns stop there and the
    padding steps after it (copies) are masked like steps after an episode.
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
        tf.nest.map_structure(unroll, segments.action), unroll(segments.log_prob), (),
        unroll(segments.policy_version))
    bootstrap = tf.nest.map_structure(lambda x: x[:, length, None], time_steps)
    return Unroll(experience, bootstrap, segments.env_id)
