"""CartPole-v1's fast path: all B sub-envs in one set of numpy arrays."""

from typing import Optional

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


class CartPoleBatchedEnv(py_environment.PyEnvironment):
    """gymnasium's vectorised CartPole as a batched tf-agents environment.

    gymnasium's `CartPoleVectorEnv` resets a finished sub-env inside the same
    `step()`, losing its final observation. Here the vector env only
    integrates the physics; episode ends are decided by this class, so that a
    finished sub-env reports `LAST` with its real final observation (discount
    0 when the pole falls, 1 when the time limit cuts the episode) and starts
    over as `FIRST` (reward 0) on its next step, the action being ignored.

    Not thread-safe: one env thread owns one instance.
    """

    def __init__(self, num_envs: int, seed: Optional[int] = None,
                 max_episode_steps: int = 500, hide_velocity: bool = False):
        """
        Args:
            num_envs: B, the number of sub-envs.
            seed: seed of the sub-envs' initial states.
            max_episode_steps: time limit of an episode (500 for CartPole-v1).
            hide_velocity: observe only cart position and pole angle, making
                the task partially observable.
        """
        super().__init__(handle_auto_reset=False)
        self._env = CartPoleVectorEnv(num_envs=num_envs)
        self._x_limit = self._env.x_threshold
        self._theta_limit = self._env.theta_threshold_radians
        # The vector env must never end an episode itself.
        self._env.x_threshold = self._env.theta_threshold_radians = np.inf
        self._env.max_episode_steps = np.iinfo(np.int32).max
        self._max_episode_steps = max_episode_steps
        self._observed = [0, 2] if hide_velocity else [0, 1, 2, 3]
        self._num_envs = num_envs
        self._seed = seed
        self._episode_steps = np.zeros(num_envs, np.int32)
        self._done = np.zeros(num_envs, bool)
        # Built once: a tf-agents spec costs more to construct than a step.
        low = self._env.single_observation_space.low[self._observed]
        self._observation_spec = array_spec.BoundedArraySpec(
            (len(self._observed),), np.float32, low, -low, name="observation")
        self._action_spec = array_spec.BoundedArraySpec((), np.int64, 0, 1, name="action")

    @property
    def batched(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        return self._num_envs

    def observation_spec(self):
        return self._observation_spec

    def action_spec(self):
        return self._action_spec

    def _observation(self, state):
        return np.ascontiguousarray(state[self._observed].T, dtype=np.float32)

    def _reset(self):
        self._env.reset(seed=self._seed)
        self._seed = None  # Seed once: later resets continue the same stream.
        self._episode_steps[:] = 0
        self._done[:] = False
        b = self._num_envs
        return ts.TimeStep(np.full(b, ts.StepType.FIRST, np.int32), np.zeros(b, np.float32),
                           np.ones(b, np.float32), self._observation(self._env.state))

    def _step(self, action):
        self._env.step(np.asarray(action))
        state = self._env.state
        restart = self._done
        if restart.any():
            state[:, restart] = self._env.np_random.uniform(
                self._env.low, self._env.high, size=(4, restart.sum())).astype(np.float32)
        self._episode_steps = np.where(restart, 0, self._episode_steps + 1)
        x, theta = state[0], state[2]
        fell = (np.abs(x) > self._x_limit) | (np.abs(theta) > self._theta_limit)
        fell &= ~restart
        self._done = fell | (self._episode_steps >= self._max_episode_steps)
        step_type = np.where(restart, ts.StepType.FIRST,
                             np.where(self._done, ts.StepType.LAST, ts.StepType.MID))
        return ts.TimeStep(step_type.astype(np.int32), (~restart).astype(np.float32),
                           (~fell).astype(np.float32), self._observation(state))
