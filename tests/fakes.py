"""Deterministic fake envs and policies for driver tests."""

import numpy as np
import tensorflow as tf
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec, tensor_spec
from tf_agents.trajectories import time_step as ts

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

    def act(self, observation, step_type, policy_state, seed=None):
        count = tf.cast(observation[:, 2], tf.int64)
        state = tf.where(step_type == ts.StepType.FIRST, 0, policy_state) + 1
        return count % 2, state, -tf.cast(count, tf.float32)
