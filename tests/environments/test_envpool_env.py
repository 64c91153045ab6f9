import gin
import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

from alf_async.training import run as run_lib
from alf_async.training.settings import RunSettings
from alf_async.environments import GymnasiumBatchedEnv, create_environment, load_envpool_env

FIRST, MID, LAST = ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST
B = 4


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


def _play(env, num_steps, seed=0):
    """Random actions; returns the stacked step types, discounts, rewards, observations."""
    spec, rng = env.action_spec(), np.random.default_rng(seed)
    steps = [env.reset()]
    for _ in range(num_steps):
        if np.issubdtype(spec.dtype, np.integer):
            action = rng.integers(spec.minimum, spec.maximum + 1, B)
        else:
            action = rng.uniform(spec.minimum, spec.maximum, (B, *spec.shape)).astype(np.float32)
        steps.append(env.step(action))
    return [np.stack([getattr(s, name) for s in steps])
            for name in ("step_type", "discount", "reward", "observation")]


@pytest.mark.parametrize("env_name, num_steps, last_discount", [
    ("Pendulum-v1", 402, 1.0),  # truncated at 200 steps: the final state is bootstrapped
    ("CartPole-v1", 200, 0.0),  # random play falls within ~20 steps: terminated
])
def test_episodes_follow_the_projects_convention(env_name, num_steps, last_discount):
    env = load_envpool_env(env_name, B, seed=1)
    try:
        types, discounts, rewards, _ = _play(env, num_steps)
    finally:
        env.close()
    assert (types[0] == FIRST).all()
    last = types == LAST
    assert last.sum() >= B
    np.testing.assert_array_equal(discounts[last], last_discount)
    after_last = np.roll(last, 1, axis=0)
    after_last[0] = False
    assert (types[after_last] == FIRST).all() and (rewards[after_last] == 0).all()
    assert ((types == FIRST) == (after_last | (np.arange(len(types)) == 0)[:, None])).all()
    if env_name == "Pendulum-v1":
        assert set(np.argwhere(last)[:, 0]) == {200, 401}


def test_same_seed_same_episodes_and_sub_envs_differ():
    def observations(seed):
        env = load_envpool_env("CartPole-v1", B, seed=seed)
        try:
            return _play(env, 30)[3]
        finally:
            env.close()
    first = observations(5)
    np.testing.assert_array_equal(first, observations(5))
    assert not np.array_equal(first, observations(6))
    assert len({tuple(row) for row in first[0]}) == B


def test_atari_matches_the_ale_path_and_marks_lost_lives():
    env = load_envpool_env("ALE/Breakout-v5", B, seed=1)
    ale = GymnasiumBatchedEnv("ALE/Breakout-v5", 1, seed=1)
    try:
        assert env.observation_spec() == ale.observation_spec()
        assert env.action_spec() == ale.action_spec()
        types, discounts, _, observations = _play(env, 600)
    finally:
        env.close()
        ale.close()
    assert observations.shape[1:] == (B, 84, 84, 4) and observations.dtype == np.uint8
    lost_lives = (types == MID) & (discounts == 0)
    assert lost_lives.sum() >= B  # random play loses a life in ~40 steps; the game goes on


def test_atari_takes_gin_settings_of_make_atari_env():
    gin.parse_config(["alf_async.make_atari_env.screen_size = 64",
                      "alf_async.make_atari_env.episodic_life = False"])
    env = load_envpool_env("ALE/Breakout-v5", B, seed=1)
    try:
        assert env.observation_spec().shape == (64, 64, 4)
        types, discounts, _, _ = _play(env, 300)
    finally:
        env.close()
    assert not ((types == MID) & (discounts == 0)).any()


def test_bad_settings_name_the_setting():
    with pytest.raises(ValueError, match=r"create_environment.env_name='NoSuchGame-v5': "
                                         r"EnvPool has no task"):
        load_envpool_env("NoSuchGame-v5", B)
    with pytest.raises(ValueError, match=r"create_environment.num_workers=2 must be 0 with "
                                         r"load_envpool_env"):
        create_environment("CartPole-v1", B, env_load_fn=load_envpool_env, num_workers=2)


@pytest.mark.slow
def test_trainer_trains_on_envpool_envs(tmp_path):
    gin.parse_config(["alf_async.create_environment.env_load_fn = @alf_async.load_envpool_env",
                      "alf_async.create_environment.env_name = 'CartPole-v1'"])
    env = create_environment(num_parallel_environments=B, seed=0)
    assert isinstance(env, GymnasiumBatchedEnv)  # with EnvPool's sub-envs inside
    env.close()
    result = run_lib.train(str(tmp_path / "run"), RunSettings(num_iterations=3, num_env_steps=None))
    assert result["iteration"] == 3 and result["env_steps"] == 3 * 4 * 32 * 16
    assert result["episodes"] > 0
