import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

from alf_async.environments import CartPoleBatchedEnv, create_environment


def _run(env, steps, action_fn):
    out = [env.reset()]
    for i in range(steps):
        out.append(env.step(action_fn(i)))
    return out


def test_cartpole_step_types_rewards_and_discounts():
    env = CartPoleBatchedEnv(8, seed=0)
    steps = _run(env, 300, lambda i: np.zeros(8, np.int64))  # always push left: falls fast
    step_type = np.stack([s.step_type for s in steps])
    reward = np.stack([s.reward for s in steps])
    discount = np.stack([s.discount for s in steps])
    obs = np.stack([s.observation for s in steps])
    assert (step_type[0] == ts.StepType.FIRST).all()
    last = step_type == ts.StepType.LAST
    assert last[:-1].sum() > 8
    # A fall ends with discount 0 and its real final observation out of bounds.
    assert (discount[last] == 0).all()
    fell = (np.abs(obs[..., 0]) > 2.4) | (np.abs(obs[..., 2]) > 12 * 2 * np.pi / 360)
    np.testing.assert_array_equal(fell, last)
    # The step after LAST is FIRST with reward 0, discount 1 and a fresh state.
    after = np.roll(last, 1, axis=0)
    after[0] = False
    assert (step_type[after] == ts.StepType.FIRST).all()
    assert (reward[after] == 0).all() and (discount[after] == 1).all()
    assert (np.abs(obs[after]) <= 0.05).all()
    mid = step_type == ts.StepType.MID
    assert (reward[mid] == 1).all() and (discount[mid] == 1).all()


def test_time_limit_truncation_keeps_discount_one():
    env = CartPoleBatchedEnv(4, seed=1, max_episode_steps=5)
    steps = _run(env, 6, lambda i: np.full(4, i % 2, np.int64))  # wobble: does not fall in 5
    assert (steps[5].step_type == ts.StepType.LAST).all()
    assert (steps[5].discount == 1).all() and (steps[5].reward == 1).all()
    assert (steps[6].step_type == ts.StepType.FIRST).all()


def test_hidden_velocity_observes_position_and_angle_only():
    env = CartPoleBatchedEnv(3, seed=0, hide_velocity=True)
    assert env.observation_spec().shape == (2,)
    assert env.reset().observation.shape == (3, 2)


def test_create_environment_checks_batch_size():
    env = create_environment(num_parallel_environments=5, seed=3)
    assert env.batched and env.batch_size == 5
    with pytest.raises(ValueError, match="expected num_parallel_environments=5"):
        create_environment(num_parallel_environments=5,
                           env_load_fn=lambda name, n, seed: CartPoleBatchedEnv(n + 1))
    with pytest.raises(ValueError, match="num_parallel_environments must be >= 1"):
        create_environment(num_parallel_environments=0)


def test_same_seed_same_episodes():
    a = _run(CartPoleBatchedEnv(4, seed=7), 50, lambda i: np.full(4, i % 2, np.int64))
    b = _run(CartPoleBatchedEnv(4, seed=7), 50, lambda i: np.full(4, i % 2, np.int64))
    np.testing.assert_array_equal(np.stack([s.observation for s in a]),
                                  np.stack([s.observation for s in b]))
