import re

import gymnasium as gym
import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

from alf_async.environments import GymnasiumBatchedEnv, create_environment

FIRST, MID, LAST = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST


class _Counter(gym.Env):
    """uint8 observation (step count, last action); action 1 at count >= 2 terminates."""

    observation_space = gym.spaces.Box(0, 255, (2,), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([0, 9], np.uint8), {}

    def step(self, action):
        self.count += 1
        obs = np.array([self.count, action], np.uint8)
        return obs, float(self.count), bool(action == 1 and self.count >= 2), False, {}


gym.register("AlfAsyncTest/Counter-v0", entry_point=_Counter, max_episode_steps=4)


def test_last_has_the_real_final_observation_and_first_follows_with_reward_0():
    env = GymnasiumBatchedEnv("AlfAsyncTest/Counter-v0", 2, seed=0)
    assert env.observation_spec().dtype == np.uint8  # pixels would stay uint8
    steps = [env.reset()] + [env.step(np.array([1, 0])) for _ in range(6)]
    step_type = np.stack([s.step_type for s in steps])
    # Sub-env 0 terminates at count 2 (action 1); sub-env 1 is truncated at 4.
    np.testing.assert_array_equal(step_type[:, 0], [FIRST, MID, LAST, FIRST, MID, LAST, FIRST])
    np.testing.assert_array_equal(step_type[:, 1], [FIRST, MID, MID, MID, LAST, FIRST, MID])
    np.testing.assert_array_equal(steps[2].observation[0], [2, 1])  # final obs, not a reset
    np.testing.assert_array_equal(steps[4].observation[1], [4, 0])
    assert steps[2].discount[0] == 0.0 and steps[4].discount[1] == 1.0  # terminated / truncated
    assert steps[2].reward[0] == 2.0 and steps[3].reward[0] == 0.0
    np.testing.assert_array_equal(steps[3].observation[0], [0, 9])  # a fresh episode
    assert steps[0].observation.dtype == np.uint8


@pytest.mark.parametrize("env_name, message", [
    ("CartPol-v1", r"env_name='CartPol-v1'.*Did you mean"),
    ("NoSuchEnv-v0", r"env_name='NoSuchEnv-v0'.*doesn't exist"),
    ("Blackjack-v1", r"observation space Tuple.*not supported"),
])
def test_unknown_ids_and_unsupported_spaces_are_one_line_value_errors(env_name, message):
    with pytest.raises(ValueError) as info:
        create_environment(env_name, 2)
    # The first line is what `python -m alf_async.train` prints (gin adds more below).
    assert re.search(message, str(info.value).splitlines()[0]), str(info.value)


@pytest.mark.parametrize("env_name, action_shape", [("Acrobot-v1", ()),
                                                    ("Pendulum-v1", (1,))])
def test_classic_control_specs(env_name, action_shape):
    env = create_environment(env_name, 3, seed=1)
    assert env.batch_size == 3 and env.action_spec().shape == action_shape
    first = env.reset()
    assert first.observation.shape == (3, *env.observation_spec().shape)
    assert (first.step_type == FIRST).all()
    env.close()


def _episode_ends(env, steps, rng):
    """Steps with random actions; returns the (discount, next step type) of every LAST."""
    spec = env.action_spec()
    out, previous = [], env.reset()
    for _ in range(steps):
        action = rng.uniform(spec.minimum, spec.maximum,
                             (env.batch_size, *spec.shape)).astype(spec.dtype)
        current = env.step(action)
        out.extend((d, s) for d, s, last in zip(previous.discount, current.step_type,
                                                  previous.step_type == LAST) if last)
        previous = current
    return out


def test_mujoco_time_limit_is_a_truncation_with_discount_1():
    env = create_environment("HalfCheetah-v4", 2, seed=0)  # never terminates; 1000-step limit
    ends = _episode_ends(env, 1002, np.random.default_rng(0))
    assert ends == [(1.0, FIRST)] * 2
    env.close()


def test_box2d_crash_is_a_termination_with_discount_0():
    env = create_environment("LunarLander-v2", 4, seed=0)
    ends = _episode_ends(env, 300, np.random.default_rng(0))  # random landers crash fast
    assert len(ends) >= 4 and all(s == FIRST for _, s in ends)
    assert any(d == 0.0 for d, _ in ends)
    env.close()


def test_continuous_actions_are_clipped_for_the_env_only():
    env = create_environment("Pendulum-v1", 1, seed=0)
    env.reset()
    seen = []
    inner = env.envs[0]
    step = inner.step
    inner.step = lambda a: seen.append(np.array(a)) or step(a)
    action = np.array([[5.0]], np.float32)
    env.step(action)
    np.testing.assert_array_equal(seen[0], [2.0])  # the env got the bound
    assert action[0, 0] == 5.0  # the caller's (stored) action is untouched
    env.close()
