"""EnvPool's C++ vectorised envs as this project's batched env (the `[envpool]` extra).

`create_environment.env_load_fn = @load_envpool_env` steps the B sub-envs of
an env thread in one EnvPool pool (C++ threads, no GIL) instead of a Python
loop over gymnasium envs. EnvPool resets a finished sub-env on the *next*
step, ignoring its action: exactly this project's convention, so that step
becomes `FIRST` (reward 0) and the step before it `LAST` with the real final
observation.

Atari ids (`ALE/<Game>-v5`) get the same `atari.AtariSettings` (gin's
`make_atari_env.*` bindings, else their defaults) from EnvPool's own preprocessing, frames
moved to the channel axis (`[84, 84, 4]` uint8, as on the ALE path), a lost
life marked for learning from `info['lives']`, and unclipped rewards. One
difference: EnvPool presses FIRE after a reset only, not after a lost life.
"""

from typing import Optional, Tuple

import gin
import numpy as np
from tf_agents.trajectories import time_step as ts

from alf_async import extras
from alf_async.environments import atari
from alf_async.environments.gymnasium_env import GymnasiumBatchedEnv
from alf_async.environments.subenvs import Arrays, observation_dtype


def atari_options(settings: atari.AtariSettings) -> Tuple[dict, bool]:
    """The preprocessing `settings` as EnvPool's options, and whether a lost life is
    marked (`episodic_life`)."""
    options = dict(noop_max=settings.noop_max, frame_skip=settings.frame_skip,
                   img_height=settings.screen_size, img_width=settings.screen_size,
                   stack_num=settings.frame_stack, gray_scale=True,
                   use_fire_reset=settings.fire_on_reset, episodic_life=False,
                   reward_clip=False,
                   repeat_action_probability=settings.repeat_action_probability)
    if settings.max_episode_steps:
        options["max_episode_steps"] = settings.max_episode_steps
    return options, settings.episodic_life


class EnvPoolSubEnvs:
    """B sub-envs of one EnvPool task, with `SubEnvs`' interface.

    Not thread-safe: one owner steps them.
    """

    def __init__(self, env_name: str, num_envs: int, seed: Optional[int] = None,
                 num_threads: int = 0):
        """
        Args:
            env_name: an EnvPool task id (`envpool.list_all_envs()`), or
                `ALE/<Game>-v5` for EnvPool's `<Game>-v5`.
            num_envs: B.
            seed: sub-env i is seeded with `seed + i` (None: random).
            num_threads: EnvPool's C++ threads (0: one per core, at most B).

        Raises:
            ValueError: envpool is not installed or has no such task (names
                the setting).
        """
        envpool = extras.require("envpool", "envpool",
                                 "create_environment.env_load_fn=load_envpool_env")
        task = env_name[len("ALE/"):] if env_name.startswith("ALE/") else env_name
        if task not in envpool.list_all_envs():
            raise ValueError(f"create_environment.env_name={env_name!r}: EnvPool has no task "
                             f"{task!r} (see envpool.list_all_envs())")
        options, self._life_loss = (atari_options(atari.AtariSettings()) if env_name.startswith("ALE/")
                                    else ({}, False))
        self._channels_last = env_name.startswith("ALE/")
        seed = int(np.random.randint(2**30)) if seed is None else seed
        self._pool = envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seed,
                                  num_threads=num_threads, **options)
        self.observation_space = self._observation_space()
        self.action_space = self._pool.action_space
        self._dtype = observation_dtype(self.observation_space)
        self._done = np.zeros(num_envs, bool)
        self._lives = np.zeros(num_envs, np.int64)

    def _observation_space(self):
        space = self._pool.observation_space
        if not self._channels_last:
            return space
        return type(space)(np.moveaxis(space.low, 0, -1), np.moveaxis(space.high, 0, -1),
                           dtype=space.dtype)

    def _observation(self, observation: np.ndarray) -> np.ndarray:
        if self._channels_last:  # [B, C, H, W] -> [B, H, W, C]
            observation = np.moveaxis(observation, 1, -1)
        return np.ascontiguousarray(observation, self._dtype)

    def reset(self) -> Arrays:
        observation, info = self._pool.reset()
        self._done[:] = False
        self._lives = np.asarray(info.get("lives", self._lives))
        b = len(self._done)
        return dict(observation=self._observation(observation), reward=np.zeros(b, np.float32),
                    discount=np.ones(b, np.float32),
                    step_type=np.full(b, ts.StepType.FIRST, np.int32))

    def step(self, action: np.ndarray) -> Arrays:
        """Steps every sub-env (those that had finished start a new episode)."""
        observation, reward, terminated, truncated, info = self._pool.step(
            np.asarray(action, self.action_space.dtype))
        first, last = self._done, terminated | truncated
        step_type = np.where(first, ts.StepType.FIRST,
                             np.where(last, ts.StepType.LAST, ts.StepType.MID)).astype(np.int32)
        discount = np.where(terminated, 0.0, 1.0).astype(np.float32)
        if self._life_loss:  # a lost life ends nothing but the value's bootstrap
            lives = np.asarray(info["lives"])
            discount[(lives < self._lives) & ~first & ~last] = 0.0
            self._lives = lives
        self._done = last
        return dict(observation=self._observation(observation), reward=reward.astype(np.float32),
                    discount=discount, step_type=step_type)

    def close(self) -> None:
        self._pool.close()


@gin.configurable(module="alf_async")
def load_envpool_env(env_name: str, num_envs: int, seed: Optional[int] = None,
                     num_threads: int = 0, num_workers: int = 0) -> GymnasiumBatchedEnv:
    """An `env_load_fn` stepping `num_envs` sub-envs in one EnvPool pool.

    Args:
        env_name: an EnvPool task id, or `ALE/<Game>-v5`.
        num_envs: B.
        seed: sub-env i is seeded with `seed + i` (None: random).
        num_threads: EnvPool's C++ threads (0: one per core, at most B).
        num_workers: must be 0: EnvPool's threads replace worker processes.
    """
    if num_workers:
        raise ValueError(f"create_environment.num_workers={num_workers} must be 0 with "
                         f"load_envpool_env (EnvPool steps the sub-envs in its own threads: "
                         f"load_envpool_env.num_threads)")
    return GymnasiumBatchedEnv(env_name, num_envs, subenvs=EnvPoolSubEnvs(
        env_name, num_envs, seed, num_threads))
