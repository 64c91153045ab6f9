"""Any registered gymnasium environment as one batched tf-agents `PyEnvironment`.

gymnasium 0.29's vector envs reset a finished sub-env inside the same
`step()`, so they cannot give the separate `FIRST` step of this project's
time-step convention without stepping the new episode blind. So
`GymnasiumBatchedEnv` runs the B sub-envs' loop itself (the same Python loop
as gymnasium's `SyncVectorEnv`): a finished sub-env reports `LAST` with its
real final observation, and is reset on the next call, which reports `FIRST`
with reward 0 and ignores its action.
"""

from typing import Optional

import gymnasium as gym
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts


def make_gymnasium_env(env_name: str, **kwargs) -> gym.Env:
    """`gym.make(env_name)`; an unknown id is a ValueError naming the setting."""
    try:
        return gym.make(env_name, **kwargs)
    except gym.error.Error as error:
        raise ValueError(f"create_environment.env_name={env_name!r}: {error}") from None


def observation_spec_of(space: gym.Space, env_name: str) -> array_spec.ArraySpec:
    """The spec of one sub-env's observations: a Box of any shape and dtype.

    Booleans become uint8 (TF queues and networks take numbers); every other
    dtype is kept, so pixels travel as uint8.
    """
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"create_environment.env_name={env_name!r}: observation space "
                         f"{space} is not supported (a Box is needed)")
    dtype = np.uint8 if space.dtype == np.bool_ else space.dtype
    return array_spec.ArraySpec(space.shape, dtype, name="observation")


def action_spec_of(space: gym.Space, env_name: str) -> array_spec.BoundedArraySpec:
    """The spec of one sub-env's actions: Discrete (int64) or a bounded Box (float32)."""
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return array_spec.BoundedArraySpec((), np.int64, start, start + int(space.n) - 1,
                                           name="action")
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ValueError(f"create_environment.env_name={env_name!r}: action space "
                             f"{space} is unbounded (policies need finite bounds)")
        return array_spec.BoundedArraySpec(space.shape, np.float32, space.low, space.high,
                                           name="action")
    raise ValueError(f"create_environment.env_name={env_name!r}: action space {space} is "
                     f"not supported (Discrete or a float Box)")


class GymnasiumBatchedEnv(py_environment.PyEnvironment):
    """B gymnasium envs of one id, stepped together with the project's convention.

    `LAST` carries the real final observation with discount 0 when the
    episode terminated and 1 when it was truncated (the final observation's
    value is bootstrapped); the sub-env's next step is `FIRST` (reward 0,
    discount 1), its action ignored. Continuous actions are clipped to the
    action bounds on their way to the env only: the stored action, and so
    its behaviour log-probability, is the one the policy sampled.

    Not thread-safe: one env thread owns one instance.
    """

    def __init__(self, env_name: str, num_envs: int, seed: Optional[int] = None):
        """
        Args:
            env_name: a registered gymnasium id.
            num_envs: B, the number of sub-envs.
            seed: sub-env i is seeded with `seed + i` at its first reset
                (None: random).
        """
        super().__init__(handle_auto_reset=False)
        self._envs = [make_gymnasium_env(env_name)]
        env = self._envs[0]
        self._observation_spec = observation_spec_of(env.observation_space, env_name)
        self._action_spec = action_spec_of(env.action_space, env_name)
        self._envs += [make_gymnasium_env(env_name) for _ in range(num_envs - 1)]
        self._num_envs = num_envs
        self._seeds = [None if seed is None else seed + i for i in range(num_envs)]
        self._done = np.zeros(num_envs, bool)
        space = env.action_space
        self._discrete = isinstance(space, gym.spaces.Discrete)
        self._low, self._high, self._action_dtype = (
            (None, None, None) if self._discrete else (space.low, space.high, space.dtype))

    @property
    def batched(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def envs(self):
        """The B gymnasium envs (e.g. to render one)."""
        return self._envs

    def observation_spec(self):
        return self._observation_spec

    def action_spec(self):
        return self._action_spec

    def _buffers(self):
        b, spec = self._num_envs, self._observation_spec
        return (np.empty((b, *spec.shape), spec.dtype), np.zeros(b, np.float32),
                np.ones(b, np.float32), np.full(b, ts.StepType.MID, np.int32))

    def _reset(self):
        observation, reward, discount, step_type = self._buffers()
        for i, env in enumerate(self._envs):
            observation[i], _ = env.reset(seed=self._seeds[i])
            self._seeds[i] = None  # seed once: later resets continue the stream
        self._done[:] = False
        step_type[:] = ts.StepType.FIRST
        return ts.TimeStep(step_type, reward, discount, observation)

    def _step(self, action):
        observation, reward, discount, step_type = self._buffers()
        if not self._discrete:
            action = np.clip(action, self._low, self._high).astype(self._action_dtype)
        for i, env in enumerate(self._envs):
            if self._done[i]:
                observation[i], _ = env.reset()
                step_type[i] = ts.StepType.FIRST
                self._done[i] = False
                continue
            observation[i], reward[i], terminated, truncated, _ = env.step(
                int(action[i]) if self._discrete else action[i])
            if terminated or truncated:
                step_type[i] = ts.StepType.LAST
                discount[i] = 0.0 if terminated else 1.0
                self._done[i] = True
        return ts.TimeStep(step_type, reward, discount, observation)

    def close(self) -> None:
        for env in self._envs:
            env.close()
