"""Deterministic fake envs and policies for driver tests; samples for loss tests."""

import contextlib
import gc
import os
import time

import gin
import numpy as np
import tensorflow as tf
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec, tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.environments import CartPoleBatchedEnv
from alf_async.experience import LearnerCounters
from alf_async.collection.driver_thread import live_driver_threads

EPISODE_LENGTH = 5


class CountingEnv(py_environment.PyEnvironment):
    """A batched env whose observation is (env_id, sub-env, step count).

    Episodes last EPISODE_LENGTH steps: FIRST where `count % EPISODE_LENGTH`
    is 0, LAST where it is EPISODE_LENGTH - 1, reward 1 on every non-FIRST
    step. Raises `RuntimeError` on step `fail_at`.
    """

    def __init__(self, env_id: int, batch_size: int = 3, fail_at: int = None, obs_dim: int = 3):
        super().__init__(handle_auto_reset=False)
        self._env_id = env_id
        self._b = batch_size
        self._fail_at = fail_at
        self._obs_dim = obs_dim
        self.count = 0
        self.closed = False

    @property
    def batched(self):
        return True

    @property
    def batch_size(self):
        return self._b

    def observation_spec(self):
        return array_spec.ArraySpec((self._obs_dim,), np.float32, name="observation")

    def action_spec(self):
        return array_spec.BoundedArraySpec((), np.int64, 0, 1, name="action")

    def _time_step(self):
        phase = np.full(self._b, self.count % EPISODE_LENGTH)
        step_type = np.where(phase == 0, ts.StepType.FIRST,
                             np.where(phase == EPISODE_LENGTH - 1, ts.StepType.LAST,
                                      ts.StepType.MID)).astype(np.int32)
        obs = np.zeros((self._b, self._obs_dim), np.float32)
        obs[:, 0], obs[:, 1], obs[:, 2] = self._env_id, np.arange(self._b), self.count
        return ts.TimeStep(step_type, (phase != 0).astype(np.float32),
                           np.ones(self._b, np.float32), obs)

    def _reset(self):
        self.count = 0
        return self._time_step()

    def _step(self, action):
        self.count += 1
        if self.count == self._fail_at:
            raise RuntimeError(f"env {self._env_id} broke at step {self.count}")
        return self._time_step()

    def close(self):
        self.closed = True


class CountingPolicy:
    """Acts 1 on odd step counts; its state counts steps since FIRST."""

    def __init__(self, env: CountingEnv):
        self.time_step_spec = tensor_spec.from_spec(env.time_step_spec())
        self.action_spec = tensor_spec.from_spec(env.action_spec())
        self.policy_state_spec = tf.TensorSpec([], tf.int32)
        self.item_terms = ()
        self.recurrent, self.burn_in = False, 0  # the learner's samples are single steps

    def act(self, observation, step_type, policy_state, seed=None, env_id=None):
        count = tf.cast(observation[:, 2], tf.int64)
        state = tf.where(step_type == ts.StepType.FIRST, 0, policy_state) + 1
        return count % 2, state, -tf.cast(count, tf.float32)


@contextlib.contextmanager
def gin_bound(bindings: dict):
    """Binds gin parameters (`{'FreshBatches.max_policy_lag': 1}`) for the block, then
    clears the configuration."""
    gin.clear_config()
    for name, value in bindings.items():
        gin.bind_parameter(name, value)
    try:
        yield
    finally:
        gin.clear_config()


def counters_of(version):
    """The driver's `LearnerCounters` for a test's version variable (None: None), env steps
    at 0."""
    return None if version is None else LearnerCounters(version, tf.Variable(0, dtype=tf.int64))


def learning_driver(policy_version, fail_env=None, batch_size=3, bindings=(), envs=None,
                    **kwargs):
    """A driver of 2 `CountingEnv`s (T = 3, Q = 2 by default; or the given `envs`)
    stamping `policy_version`, built with the gin `bindings` (a dict) of its components."""
    envs = envs or [CountingEnv(i, batch_size, fail_at=20 if i == fail_env else None)
                    for i in range(2)]
    kwargs = dict(dict(actor_queue_cap=1, unroll_length=3, learn_queue_cap=2), **kwargs)
    with gin_bound(dict(bindings)):
        return AsyncOffPolicyDriver(lambda i: envs[i], CountingPolicy(envs[0]),
                                    counters_of(policy_version), num_envs=2, **kwargs)


# The driver threads alive when the running test started (tests/conftest.py sets it):
# a thread an earlier test leaked fails that test, not every test after it.
THREADS_AT_TEST_START = set()


def leaked_driver_threads():
    """The `DriverThread`s this test started that still run."""
    return [t for t in live_driver_threads() if t not in THREADS_AT_TEST_START]


@contextlib.contextmanager
def garbage_collector_off():
    """Python's cyclic garbage collector off for the block: what is freed there was
    freed by its owner, not found later."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def timed_stop(driver, bound=2.0):
    """Stops `driver`, asserting that it took less than `bound` seconds and left no thread."""
    start = time.time()
    driver.stop()
    elapsed = time.time() - start
    assert elapsed < bound, f"stop() took {elapsed:.2f}s"
    assert not leaked_driver_threads(), "threads survived stop()"


class VersionPolicy(CountingPolicy):
    """Acts with the policy version itself: its "weights" are the version variable.

    The action is the version this call read, so a test can tell whether the
    stamp on a step is the version of the weights that acted.
    """

    def __init__(self, env: CountingEnv, version: tf.Variable):
        super().__init__(env)
        self._version = version

    def act(self, observation, step_type, policy_state, seed=None, env_id=None):
        count, state, log_prob = super().act(observation, step_type, policy_state, seed)
        return tf.fill(tf.shape(count), self._version.read_value()), state, log_prob


class StatelessCountingPolicy(CountingPolicy):
    """`CountingPolicy` without a policy state (what replay-based learners act with)."""

    def __init__(self, env: CountingEnv):
        super().__init__(env)
        self.policy_state_spec = ()

    def act(self, observation, step_type, policy_state, seed=None, env_id=None):
        count = tf.cast(observation[:, 2], tf.int64)
        return count % 2, (), -tf.cast(count, tf.float32)


class WeightPolicy(tf.Module):
    """`CountingPolicy` whose action is the value of its one variable, `weight`.

    Remote tests publish weights and read back, from the actions, which
    weights acted.
    """

    def __init__(self, time_step_spec, action_spec, weight_shape=(), stateless=False):
        super().__init__(name="weight_policy")
        self.time_step_spec = time_step_spec
        self.action_spec = action_spec
        self.policy_state_spec = () if stateless else tf.TensorSpec([], tf.int32)
        self.recurrent, self.burn_in = False, 0  # a replay cuts windows
        self.weight = tf.Variable(tf.zeros(weight_shape, tf.int64))

    def act(self, observation, step_type, policy_state, seed=None, env_id=None):
        state = () if self.policy_state_spec == () else (
            tf.where(step_type == ts.StepType.FIRST, 0, policy_state) + 1)
        action = tf.fill(tf.shape(step_type), tf.reshape(self.weight, [-1])[0])
        return action, state, -tf.cast(observation[:, 2], tf.float32)


def weight_policy_for(env, weight_shape=(), stateless=False):
    return WeightPolicy(tensor_spec.from_spec(env.time_step_spec()),
                        tensor_spec.from_spec(env.action_spec()), weight_shape, stateless)


def cartpole_actor_critic(algorithm_class, **kwargs):
    """An actor-critic algorithm (PPO, IMPALA) for CartPole's specs."""
    env = CartPoleBatchedEnv(2)
    return algorithm_class(env.time_step_spec(), env.action_spec(), **kwargs)


def actor_critic_samples(rng, n: int = 64, behaviour_probs=(0.2, 0.8)):
    """N random CartPole training samples (the dict `preprocess` returns)."""
    return dict(observation=rng.normal(size=(n, 4)).astype(np.float32),
                step_type=np.full(n, ts.StepType.MID, np.int32),
                action=rng.integers(0, 2, n).astype(np.int64),
                behaviour_log_prob=np.log(rng.uniform(*behaviour_probs, n)).astype(np.float32),
                advantage=rng.normal(size=n).astype(np.float32),
                value_target=rng.normal(size=n).astype(np.float32),
                mask=np.ones(n, np.float32))


def read_scalars(root_dir):
    """tag -> [(step, value)] from a run's train/ event files."""
    # pylint: disable=import-outside-toplevel
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(os.path.join(root_dir, "train"),
                                             size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    return {tag: [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if not tag.startswith("config/")}
