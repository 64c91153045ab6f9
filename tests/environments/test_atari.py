import gymnasium as gym
import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

from alf_async.environments import atari
from alf_async.environments.gymnasium_env import GymnasiumBatchedEnv

FIRE = 1


class LivesEnv(gym.Env):
    """A game of 3 lives: the step count is the observation; a life is lost
    every 4 steps unless the last action was FIRE; reward = the action."""

    observation_space = gym.spaces.Box(0, 1000, (1,), np.int64)
    action_space = gym.spaces.Discrete(3)

    def __init__(self):
        self.actions = []

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT"]

    def reset(self, *, seed=None, options=None):
        self.t, self.lives = 0, 3
        self.actions.append("reset")
        return np.array([0]), {"lives": self.lives}

    def step(self, action):
        self.t += 1
        self.actions.append(int(action))
        if self.t % 4 == 0 and action != FIRE:
            self.lives -= 1
        return np.array([self.t]), float(action), self.lives == 0, False, {"lives": self.lives}


gym.register("LivesEnv-v0", entry_point=lambda: atari.LifeLoss(atari.FireOnReset(LivesEnv())))


def test_fire_on_reset_fires_after_reset_and_after_a_lost_life_only():
    env = atari.FireOnReset(LivesEnv())
    observation, _ = env.reset()
    assert env.unwrapped.actions == ["reset", FIRE] and observation[0] == 1
    rewards = [env.step(2)[1] for _ in range(3)]  # the 4th step loses a life: FIRE follows
    assert env.unwrapped.actions == ["reset", FIRE, 2, 2, 2, FIRE]
    assert rewards == [2.0, 2.0, 2.0 + FIRE]  # FIRE's reward joins the step that lost the life
    env.step(0)
    assert env.unwrapped.actions[-1] == 0  # no life lost: no FIRE


def test_life_loss_marks_lost_lives_but_not_the_end_of_the_game():
    env = atari.LifeLoss(LivesEnv())
    env.reset()
    marks = []
    while True:
        _, _, terminated, _, info = env.step(0)
        marks.append(bool(info.get("life_lost")))
        if terminated:
            break
    assert marks == [False, False, False, True] * 2 + [False] * 4  # the last life ends the game


def test_a_lost_life_is_discount_0_on_a_mid_step_and_the_episode_goes_on():
    env = GymnasiumBatchedEnv("LivesEnv-v0", 2, seed=0)
    steps = [env.reset()] + [env.step(np.zeros(2, np.int64)) for _ in range(12)]
    step_types = [int(t.step_type[0]) for t in steps]
    discounts = [float(t.discount[0]) for t in steps]
    # The game's clock: FireOnReset's FIRE is tick 1, so our step k is tick k + 1 until a
    # life is lost at ticks 4 and 8 (our steps 3 and 6), each followed by a FIRE tick; the
    # last life goes at tick 12 (our step 9), and a new game starts.
    assert step_types == ([ts.StepType.FIRST] + [ts.StepType.MID] * 8 + [ts.StepType.LAST]
                          + [ts.StepType.FIRST] + [ts.StepType.MID] * 2)
    assert [k for k, d in enumerate(discounts) if d == 0] == [3, 6, 9]


def test_atari_observations_are_84x84x4_uint8_the_last_four_frames_channels_last():
    env = atari.make_atari_env("ALE/Pong-v5", atari.AtariSettings(noop_max=0))
    observation, _ = env.reset(seed=0)
    assert observation.shape == (84, 84, 4) and observation.dtype == np.uint8
    for _ in range(30):
        previous = observation
        observation, *_ = env.step(env.action_space.sample())
    assert observation.shape == (84, 84, 4) and observation.dtype == np.uint8
    np.testing.assert_array_equal(observation[..., :3], previous[..., 1:])  # a sliding stack
    assert not np.array_equal(observation[..., 3], observation[..., 0])  # the game moves
    env.close()


@pytest.mark.slow
def test_breakout_random_play_loses_lives_as_mid_steps_and_reports_full_games():
    env = GymnasiumBatchedEnv("ALE/Breakout-v5", 2, seed=3)
    assert env.observation_spec().shape == (84, 84, 4)
    assert env.observation_spec().dtype == np.uint8 and env.action_spec().maximum == 3
    rng = np.random.default_rng(0)
    env.reset()
    lost, games = 0, 0
    for _ in range(1500):
        step = env.step(rng.integers(0, 4, 2))
        lost += int(np.sum((step.step_type == ts.StepType.MID) & (step.discount == 0)))
        games += int(np.sum(step.step_type == ts.StepType.LAST))
        assert step.observation.dtype == np.uint8
    env.close()
    assert games >= 1
    assert lost >= 4 * games  # Breakout has 5 lives: 4 lost lives end no game


@pytest.mark.parametrize("name, extra", [("ALE/Breakot-v5", "atari"),
                                         ("MinAtar/Breakot-v1", "minatar")])
def test_unknown_pixel_ids_name_the_setting_the_suggestion_and_the_extra(name, extra):
    with pytest.raises(ValueError) as error:
        GymnasiumBatchedEnv(name, 2)
    message = str(error.value)
    assert "\n" not in message
    assert f"create_environment.env_name='{name}'" in message
    assert "Did you mean: `Breakout`?" in message and f".[{extra}]" in message


def test_minatar_frames_travel_as_uint8_planes():
    env = GymnasiumBatchedEnv("MinAtar/Breakout-v1", 3, seed=0)
    assert env.observation_spec().shape == (10, 10, 4)
    assert env.observation_spec().dtype == np.uint8 and env.action_spec().maximum == 2
    observation = env.reset().observation
    assert observation.dtype == np.uint8 and set(np.unique(observation)) <= {0, 1}
    assert observation.sum() > 0
    env.close()
