"""`UniformReplayBatches` in a driver: windows, ratio, settings, starvation."""

import gin
import numpy as np
import pytest
from tf_agents.trajectories import time_step as ts

from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.errors import LearnerStarvedError
from alf_async.training import assembly
from fakes import CountingEnv, StatelessCountingPolicy, gin_bound, learning_driver, timed_stop


def _replay_driver(**replay_settings):
    """Two CountingEnvs of B = 3, T = 4, feeding a ReplayBuffer of 2-step windows."""
    settings = dict(capacity=1000, min_size=24, batch_size=32, sequence_length=2,
                    replay_ratio=4.0)
    settings.update(replay_settings)
    gin.clear_config()
    for name, value in settings.items():
        gin.bind_parameter(f"ReplayBuffer.{name}", value)
    envs = [CountingEnv(i, 3) for i in range(2)]
    try:
        return AsyncOffPolicyDriver(lambda i: envs[i], StatelessCountingPolicy(envs[0]), None,
                                    num_envs=2, unroll_length=4, exp_replayer="uniform")
    finally:
        gin.clear_config()


def test_uniform_replay_batches_are_windows_of_one_sub_env_with_the_settings_ratio():
    driver = _replay_driver()
    assert driver.learn_batch_shape == (32, 2, 1)
    driver.start()
    try:
        env_steps = 0
        for _ in range(20):
            batch = driver.get_training_exps()
            env_steps += batch.env_steps
            obs = batch.experience.time_step.observation.numpy()[:, :, 0]  # [S, 2, 3]
            boot = batch.bootstrap.observation.numpy()[:, 0]
            assert obs.shape == (32, 2, 3)
            # Every window is consecutive steps of one sub-env of one env.
            steps = np.concatenate([obs, boot[:, None]], 1)
            cut = batch.experience.time_step.step_type.numpy()[:, 1, 0] == ts.StepType.LAST
            for column in range(2):
                assert (steps[:, :, column] == steps[:, :1, column]).all()
            np.testing.assert_array_equal(steps[:, 1, 2], steps[:, 0, 2] + 1)
            ok = ~cut  # a window cut at its segment's end repeats the bootstrap step
            np.testing.assert_array_equal(steps[ok, 2, 2], steps[ok, 0, 2] + 2)
            np.testing.assert_array_equal(obs[:, 0, 0], batch.env_ids.numpy())
        replay = driver.batches.replay
        assert env_steps <= replay.inserted_steps
        assert replay.sampled_windows == 20 * 32
        assert replay.achieved_ratio <= replay.replay_ratio + 0.5
    finally:
        timed_stop(driver)


@pytest.mark.parametrize("kwargs, message", [
    (dict(exp_replayer="priority"),
     "exp_replayer must be one of 'one_time', 'uniform', 'prioritized', 'dataset', 'hybrid', "
     "got 'priority'"),
    (dict(exp_replayer="prioritized"),
     "exp_replayer='prioritized' wants the per-item loss term 'td_error' back after each "
     "update, which CountingPolicy's loss does not supply"),
    (dict(exp_replayer="uniform", deterministic=True, seed=1),
     "deterministic=True needs exp_replayer='one_time'"),
])
def test_uniform_replay_settings_that_cannot_work_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        learning_driver(None, **kwargs)


@pytest.mark.parametrize("bindings, message", [
    ({"FreshBatches.replay_proportion": 0.5, "FreshBatches.replay_buffer_num_slots": 4},
     "FreshBatches.replay_proportion=0.5 does not apply to exp_replayer='uniform'"),
    ({"PrioritizedReplayBatches.priority_replay_alpha": 0.5},
     "PrioritizedReplayBatches.priority_replay_alpha=0.5 does not apply to "
     "exp_replayer='uniform'")])
def test_options_of_a_source_the_run_does_not_build_are_refused_with_its_settings(bindings,
                                                                                   message):
    """The run's settings are read from gin once (`assembly.run_settings`): an option
    of another learn-batch source is refused there, before anything is built."""
    with gin_bound({"AsyncOffPolicyDriver.exp_replayer": "uniform", **bindings}):
        with pytest.raises(ValueError, match=message):
            assembly.run_settings()
        gin.bind_parameter("AsyncOffPolicyDriver.exp_replayer", "prioritized")
        if "Prioritized" not in message:  # its own options apply to the source it builds
            with pytest.raises(ValueError, match="does not apply to exp_replayer='prioritized'"):
                assembly.run_settings()


def test_a_starved_replay_learner_gets_the_diagnosis():
    envs = [CountingEnv(0, 3)]
    gin.clear_config()
    gin.bind_parameter("ReplayBuffer.capacity", 10**7)
    gin.bind_parameter("ReplayBuffer.min_size", 10**7)  # not within the timeout
    gin.bind_parameter("LearnFeed.learner_queue_timeout", 1.0)
    try:
        driver = AsyncOffPolicyDriver(lambda i: envs[i], StatelessCountingPolicy(envs[0]), None,
                                      num_envs=1, actor_queue_cap=1, unroll_length=4,
                                      exp_replayer="uniform")
    finally:
        gin.clear_config()
    driver.start()
    try:
        with pytest.raises(LearnerStarvedError, match="env steps put in replay"):
            driver.get_training_exps()
    finally:
        timed_stop(driver)
