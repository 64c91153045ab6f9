"""Any registered gymnasium environment as one batched tf-agents `PyEnvironment`.

The sub-envs are stepped by `subenvs.SubEnvs` in this process, or by
`subenvs.WorkerSubEnvs` in worker processes; this module turns their arrays
into tf-agents time steps and checks the spaces.
"""

from typing import Optional

import gymnasium as gym
import numpy as np
from tf_agents.environments import py_environment
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from alf_async.environments.subenvs import (SubEnvs, WorkerSubEnvs, make_gymnasium_env,
                                            observation_dtype)


def observation_spec_of(space: gym.Space, env_name: str) -> array_spec.ArraySpec:
    """The spec of one sub-env's observations: a Box of any shape and dtype.

    Booleans become uint8 (TF queues and networks take numbers); every other
    dtype is kept, so pixels travel as uint8.
    """
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"create_environment.env_name={env_name!r}: observation space "
                         f"{space} is not supported (a Box is needed)")
    return array_spec.ArraySpec(space.shape, observation_dtype(space), name="observation")


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
    """B sub-envs of one gymnasium id, stepped together with the project's convention.

    `LAST` carries the real final observation with discount 0 when the
    episode terminated and 1 when it was truncated (the final observation's
    value is bootstrapped); the sub-env's next step is `FIRST` (reward 0,
    discount 1), its action ignored. Continuous actions are clipped to the
    action bounds on their way to the env only: the stored action, and so
    its behaviour log-probability, is the one the policy sampled.

    Not thread-safe: one env thread owns one instance.
    """

    def __init__(self, env_name: str, num_envs: int, seed: Optional[int] = None,
                 num_workers: int = 0, subenvs=None):
        """
        Args:
            env_name: a registered gymnasium id.
            num_envs: B, the number of sub-envs.
            seed: sub-env i is seeded with `seed + i` at its first reset
                (None: random).
            num_workers: W > 0 steps the sub-envs in W worker processes of
                B / W sub-envs each; 0 steps them in this process.
            subenvs: instead, B sub-envs already built by another backend with
                `SubEnvs`' interface and `observation_space`, `action_space`
                (e.g. `envpool_env.EnvPoolSubEnvs`).

        Raises:
            ValueError: an unknown id, an unsupported space, or a W that does
                not divide B (each names its setting).
        """
        super().__init__(handle_auto_reset=False)
        if num_workers < 0 or (num_workers and num_envs % num_workers):
            raise ValueError(f"create_environment.num_workers={num_workers} must be >= 0 and "
                             f"divide num_parallel_environments={num_envs}")
        probe = subenvs or make_gymnasium_env(env_name)
        space, observation_space = probe.action_space, probe.observation_space
        if subenvs is None:
            probe.close()
        self._observation_spec = observation_spec_of(observation_space, env_name)
        self._action_spec = action_spec_of(space, env_name)
        self._discrete = isinstance(space, gym.spaces.Discrete)
        self._low, self._high, self._action_dtype = (
            (None, None, None) if self._discrete else (space.low, space.high, space.dtype))
        self._num_envs = num_envs
        seeds = [None if seed is None else seed + i for i in range(num_envs)]
        if subenvs is None:
            subenvs = (WorkerSubEnvs(env_name, num_envs, num_workers, seeds, observation_space,
                                     space) if num_workers else SubEnvs(env_name, num_envs, seeds))
        self._subenvs = subenvs

    @property
    def batched(self) -> bool:
        return True

    @property
    def batch_size(self) -> int:
        return self._num_envs

    @property
    def envs(self):
        """The B gymnasium envs (e.g. to render one); in-process sub-envs only."""
        return self._subenvs.envs

    @property
    def worker_pids(self):
        """The worker processes' ids (empty without workers)."""
        return getattr(self._subenvs, "pids", [])

    def observation_spec(self):
        return self._observation_spec

    def action_spec(self):
        return self._action_spec

    @staticmethod
    def _time_step(arrays) -> ts.TimeStep:
        return ts.TimeStep(arrays["step_type"], arrays["reward"], arrays["discount"],
                           arrays["observation"])

    def _reset(self):
        return self._time_step(self._subenvs.reset())

    def _step(self, action):
        if self._discrete:
            action = np.asarray(action)
        else:
            action = np.clip(action, self._low, self._high).astype(self._action_dtype)
        return self._time_step(self._subenvs.step(action))

    def close(self) -> None:
        self._subenvs.close()
