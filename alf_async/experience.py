"""The records that travel through the driver's queues, and their specs.

Time-step convention (as in ALF): step `t` holds the observation the agent
sees, the reward received on arriving there and the discount of that arrival,
plus the action taken from it. A `LAST` step's action is ignored by the env,
whose next step is the `FIRST` step of a new episode (reward 0, discount 1).
"""

from typing import Any, NamedTuple, Tuple

import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import trajectory

Nest = Any


class LearnerCounters(NamedTuple):
    """The learner's counters that collection and replay read (host-side int64
    scalar variables; read from any thread, assigned by the learner's).

    Attributes:
        version: learner updates completed: the policy version stamped on steps.
        env_steps: env steps trained on so far.
    """
    version: tf.Variable
    env_steps: tf.Variable

    @classmethod
    def at_zero(cls) -> "LearnerCounters":
        """Counters of their own, at 0 (a driver without a learner)."""
        return cls(*[tf.Variable(0, dtype=tf.int64, trainable=False) for _ in range(2)])


class ActRequest(NamedTuple):
    """An env thread asks for actions. Leaves `[B, ...]` (env_id is a scalar).

    It carries only what the policy reads: the observation, the step type
    (where episodes start) and the policy state.
    """
    observation: Nest
    step_type: Any
    policy_state: Nest
    env_id: Any


class ActReply(NamedTuple):
    """An actor's answer to one `ActRequest`. Leaves `[B, ...]`.

    `policy_state` is the state after acting, `log_prob` the behaviour
    policy's log-probability of `action` and `policy_version` the learner's
    update count of the weights that acted.
    """
    action: Nest
    policy_state: Nest
    log_prob: Any
    policy_version: Any


class Experience(NamedTuple):
    """Steps of an unroll, leaves `[T, B, ...]` (`[Q, T, B, ...]` in a batch).

    `policy_state` is the state the policy was in *before* acting at the step.
    """
    time_step: Nest
    action: Nest
    log_prob: Any
    policy_state: Nest
    policy_version: Any


class Unroll(NamedTuple):
    """One env thread's T steps and the time step that follows them.

    `experience` leaves are `[T, B, ...]`; `bootstrap` is the `[B, ...]` time
    step after the last one (its value bootstraps advantage estimates), and
    `env_id` the scalar id of the env thread that produced it.
    """
    experience: Experience
    bootstrap: Nest
    env_id: Any


class LogRecord(NamedTuple):
    """The slim part of an unroll the log thread needs: `[T, B]` leaves."""
    reward: Any
    step_type: Any
    env_id: Any


class LearnBatch(NamedTuple):
    """What `AsyncOffPolicyDriver.get_training_exps()` returns.

    Attributes:
        experience: `Experience` with leaves `[Q, T, B, ...]`.
        bootstrap: time step after each unroll, leaves `[Q, B, ...]`.
        env_ids: `[Q]` int32, the env thread of each unroll.
        env_steps: Python int, `Q * T * B`.
        weights: None, or `[Q, B]` float32 importance weights of each
            column's samples in the loss (prioritized replay).
        items: None, or what the batch source needs back after the update
            (`after_update`): which stored items the batch holds.
        wants_back: names of the algorithm's per-item loss terms its source
            wants after the update (`BatchSource.wants_back`; the feed sets
            it); the learner computes those and nothing else.
    """
    experience: Experience
    bootstrap: Nest
    env_ids: Any
    env_steps: int
    weights: Any = None
    items: Any = None
    wants_back: Tuple[str, ...] = ()


def zeros_learn_batch(unroll_spec: Unroll, shape, weighted: bool = False) -> LearnBatch:
    """A learn batch of zeros shaped as a batch source makes them from `unroll_spec`'s
    unrolls (experience leaves `[T, B, ...]`, bootstrap `[B, ...]`).

    Args:
        unroll_spec: the learn queue's `Unroll` of `tf.TensorSpec`s.
        shape: `(Q', T', B')`, the source's `shape()`.
        weighted: with float32 importance weights `[Q', B']`.

    Returns:
        A `LearnBatch`: experience `[Q', T', B', ...]`, bootstrap
        `[Q', B', ...]`, env_ids `[Q']`; what `Learner.trace` compiles the
        update on before any data has arrived.
    """
    q, t, b = shape
    experience = tf.nest.map_structure(lambda s: tf.zeros([q, t, b, *s.shape[2:]], s.dtype),
                                       unroll_spec.experience)
    bootstrap = tf.nest.map_structure(lambda s: tf.zeros([q, b, *s.shape[1:]], s.dtype),
                                      unroll_spec.bootstrap)
    return LearnBatch(experience, bootstrap, tf.zeros([q], unroll_spec.env_id.dtype), q * t * b,
                      weights=tf.zeros([q, b], tf.float32) if weighted else None)


def unroll_trajectory(unroll: Unroll) -> trajectory.Trajectory:
    """The T transitions of an unroll as a tf-agents `Trajectory`, leaves `[B, T, ...]`.

    Transition t goes from step t to step t + 1 (the bootstrap after the
    last): its `reward` and `discount` are step t + 1's (tf-agents'
    convention); `policy_info` holds the behaviour `log_prob`.
    """
    experience = unroll.experience
    following = tf.nest.map_structure(lambda x, last: tf.concat([x[1:], last[None]], 0),
                                      experience.time_step, unroll.bootstrap)
    batch_major = lambda x: tf.experimental.numpy.swapaxes(x, 0, 1)
    return tf.nest.map_structure(batch_major, trajectory.Trajectory(
        step_type=experience.time_step.step_type, observation=experience.time_step.observation,
        action=experience.action, policy_info={"log_prob": experience.log_prob},
        next_step_type=following.step_type, reward=following.reward,
        discount=following.discount))


def batched(spec: Nest, *outer_dims: int) -> Nest:
    """Converts array or tensor specs to `tf.TensorSpec`s with outer dims."""
    return tf.nest.map_structure(
        lambda s: tf.TensorSpec([*outer_dims, *s.shape], s.dtype),
        tensor_spec.from_spec(spec))


def make_specs(time_step_spec, action_spec, policy_state_spec, batch_size: int,
               unroll_length: int):
    """Specs of one request, reply, unroll and log record.

    Args:
        time_step_spec: unbatched time-step spec of one sub-env (tf-agents
            convention, as are the next two).
        action_spec: unbatched action spec.
        policy_state_spec: unbatched policy-state spec (`()` if stateless).
        batch_size: B, sub-envs per env thread.
        unroll_length: T, steps per unroll.

    Returns:
        `(request_spec, reply_spec, unroll_spec, log_spec)`.
    """
    b, t = batch_size, unroll_length
    scalar = lambda dtype: tf.TensorSpec([], dtype)
    log_prob = tf.TensorSpec([], tf.float32)
    version = tf.TensorSpec([], tf.int64)
    request = ActRequest(batched(time_step_spec.observation, b),
                         batched(time_step_spec.step_type, b),
                         batched(policy_state_spec, b), scalar(tf.int32))
    reply = ActReply(batched(action_spec, b), batched(policy_state_spec, b),
                     batched(log_prob, b), batched(version, b))
    experience = Experience(
        batched(time_step_spec, t, b), batched(action_spec, t, b), batched(log_prob, t, b),
        batched(policy_state_spec, t, b), batched(version, t, b))
    unroll = Unroll(experience, batched(time_step_spec, b), scalar(tf.int32))
    log = LogRecord(tf.TensorSpec([t, b], tf.float32), tf.TensorSpec([t, b], tf.int32),
                    scalar(tf.int32))
    return request, reply, unroll, log
