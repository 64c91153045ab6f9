"""Atari 2600 games through ALE, with DeepMind's preprocessing, as gymnasium envs.

`make_atari_env('ALE/<Game>-v5')` builds the standard pipeline from
gymnasium's own wrappers: v5 with frame skip 1 underneath (sticky actions
at v5's 0.25 by default), `AtariPreprocessing` (up to 30 no-op starts,
frame skip 4 with max-pooling of the last two frames, 84x84 grayscale,
uint8), FIRE to start the game where it needs it, a stack of the last 4
frames on the channel axis: `[84, 84, 4]` uint8 observations.

Two classic tricks apply to learning only, so that the returns reported
are those of full, unclipped games:

- end of life: `LifeLoss` marks a lost life with `info['life_lost']`,
  which `SubEnvs` turns into discount 0 on a MID step (the value is not
  bootstrapped across the lost life, the episode goes on);
- reward clipping: `ActorCriticAlgorithm.reward_clip` clips rewards
  inside the loss.

`ale_py` (the `[atari]` extra) carries the ROMs in its wheel; importing it
registers the `ALE/...` ids with gymnasium.
"""

import dataclasses
from typing import Optional

import gin
import gymnasium as gym
import numpy as np

from alf_async import extras


class _LivesWrapper(gym.Wrapper):
    """Follows the game's `info['lives']` to tell when a life is lost."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0

    def _lost_life(self, info, terminated: bool, truncated: bool) -> bool:
        """Whether this step lost a life but not the game; remembers the lives left."""
        lives = info.get("lives", 0)
        lost = lives < self._lives and not (terminated or truncated)
        self._lives = lives
        return lost


class FireOnReset(_LivesWrapper):
    """Presses FIRE after every reset and every lost life (games that wait for it).

    Breakout, for one, shows no ball until FIRE; without this, an agent
    that has not yet learnt to press it sees nothing happen.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._fire = env.unwrapped.get_action_meanings().index("FIRE")

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        observation, _, terminated, truncated, info = self.env.step(self._fire)
        if terminated or truncated:  # cannot happen in practice; start again
            return self.env.reset(**kwargs)
        self._lives = info.get("lives", 0)
        return observation, info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self._lost_life(info, terminated, truncated):
            observation, more, terminated, truncated, info = self.env.step(self._fire)
            reward += more
            self._lives = info.get("lives", 0)
        return observation, reward, terminated, truncated, info


class LifeLoss(_LivesWrapper):
    """Sets `info['life_lost'] = True` on a step that loses a life but not the game."""

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self._lives = info.get("lives", 0)
        return observation, info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self._lost_life(info, terminated, truncated):
            info = dict(info, life_lost=True)
        return observation, reward, terminated, truncated, info


class ChannelsLast(gym.ObservationWrapper):
    """`[C, H, W]` frame stacks (gymnasium's `FrameStack`) as `[H, W, C]` arrays."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            np.moveaxis(space.low, 0, -1), np.moveaxis(space.high, 0, -1), dtype=space.dtype)

    def observation(self, observation):
        return np.moveaxis(np.asarray(observation), 0, -1)


def _import_ale(env_name: str) -> None:
    extras.require("ale_py", "atari", f"create_environment.env_name={env_name!r}")


@gin.configurable("make_atari_env", module="alf_async")
@dataclasses.dataclass(frozen=True)
class AtariSettings:
    """DeepMind's preprocessing of a game; gin binds them as `make_atari_env.<field>`.

    Attributes:
        noop_max: at most this many no-op actions after a reset.
        frame_skip: each action repeats this many frames (max-pooled).
        screen_size: frames are resized to this square size, in grayscale.
        frame_stack: the last this many frames make an observation.
        fire_on_reset: press FIRE after a reset or a lost life, in games
            with a FIRE action.
        episodic_life: mark a lost life for learning (`LifeLoss`).
        repeat_action_probability: sticky actions (v5's default 0.25).
        max_episode_steps: truncate games after this many steps (None:
            ALE's 108,000 frames, i.e. 27,000 steps at frame skip 4).
    """
    noop_max: int = 30
    frame_skip: int = 4
    screen_size: int = 84
    frame_stack: int = 4
    fire_on_reset: bool = True
    episodic_life: bool = True
    repeat_action_probability: float = 0.25
    max_episode_steps: Optional[int] = None


def make_atari_env(env_name: str, settings: Optional[AtariSettings] = None,
                   **make_kwargs) -> gym.Env:
    """One preprocessed Atari game; observations `[screen_size, screen_size, frame_stack]` uint8.

    Args:
        env_name: an `ALE/<Game>-v5` id.
        settings: the preprocessing (None: gin's `make_atari_env.*`, `AtariSettings()`).
        **make_kwargs: passed on to `gym.make` (e.g. `render_mode`).

    Raises:
        ValueError: `ale_py` is not installed (names the extra).
        gymnasium.error.Error: an unknown id.
    """
    _import_ale(env_name)
    settings = settings or AtariSettings()
    env = gym.make(env_name, frameskip=1,
                   repeat_action_probability=settings.repeat_action_probability, **make_kwargs)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=settings.noop_max,
                                          frame_skip=settings.frame_skip,
                                          screen_size=settings.screen_size, grayscale_obs=True,
                                          scale_obs=False)
    if settings.fire_on_reset and "FIRE" in env.unwrapped.get_action_meanings():
        env = FireOnReset(env)
    if settings.episodic_life:
        env = LifeLoss(env)
    env = ChannelsLast(gym.wrappers.FrameStack(env, settings.frame_stack))
    steps = settings.max_episode_steps
    return gym.wrappers.TimeLimit(env, steps) if steps else env
