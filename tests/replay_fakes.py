"""Counting unrolls for replay tests: every value tells its step, column and unroll."""

import time

import numpy as np
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.experience import Experience, Unroll, make_specs

T, B = 8, 2
MID, LAST = int(ts.StepType.MID), int(ts.StepType.LAST)


def unroll_spec(state_size: int = 0):
    """The spec of a `[T, B]` unroll of 2-float observations and scalar actions
    (and with `state_size`, a policy state of one `[state_size]` float)."""
    time_step_spec = ts.time_step_spec(tf.TensorSpec([2], tf.float32))
    action_spec = tf.TensorSpec([], tf.int64)
    state_spec = (tf.TensorSpec([state_size], tf.float32),) if state_size else ()
    return make_specs(time_step_spec, action_spec, state_spec, B, T)[2]


def counting_unroll(first: int, env_id: int = 0, step_type=None) -> Unroll:
    """A numpy unroll whose observations count steps: column b, step t -> first + t + 100 b."""
    count = (first + np.arange(T + 1)[:, None] + 100 * np.arange(B)[None]).astype(np.float32)
    types = np.full((T + 1, B), MID, np.int32) if step_type is None else step_type
    time_steps = ts.TimeStep(types, count, np.ones_like(count),
                             np.stack([count, -count], -1))
    steps = ts.TimeStep(*[x[:T] for x in time_steps])
    bootstrap = ts.TimeStep(*[x[T] for x in time_steps])
    experience = Experience(steps, count[:T].astype(np.int64), -count[:T], (),
                            count[:T].astype(np.int64))
    return Unroll(experience, bootstrap, np.int32(env_id))


def replay_buffer(**kwargs) -> ReplayBuffer:
    """A `ReplayBuffer` of `unroll_spec()` unrolls: small settings, `kwargs` over them."""
    settings = dict(capacity=10_000, min_size=T, batch_size=64, sequence_length=1,
                    replay_ratio=4.0, ratio_tolerance=0.1)
    settings.update(kwargs)
    return ReplayBuffer(unroll_spec(), **settings)


def deadline(seconds: float):
    """A `should_stop` that turns true `seconds` from now."""
    end = time.monotonic() + seconds
    return lambda: time.monotonic() > end
