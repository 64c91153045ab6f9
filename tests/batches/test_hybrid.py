"""`HybridBatches` in a driver: each learn batch the online replay's windows and a
dataset's, the dataset's share of the samples reported."""

import gin
import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.batches.dataset import OFFLINE_ENV_ID
from alf_async.batches.hybrid import offline_share
from alf_async.datasets.recorder import open_recorder
from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.experience import Experience, LearnBatch
from fakes import EPISODE_LENGTH, CountingEnv, StatelessCountingPolicy, timed_stop


def _dataset(directory, episodes: int = 12):
    """Episodes of a CountingEnv whose observations are marked (column 0 = 100)."""
    env = CountingEnv(0)
    recorder = open_recorder(str(directory), "Counting-v0", env.observation_spec(),
                             env.action_spec(), dict(kind="play", root_dir="/r"))
    t = np.arange(EPISODE_LENGTH * episodes)
    phase = t % EPISODE_LENGTH
    steps = dict(observation=np.stack([np.full(len(t), 100.0), np.zeros(len(t)), t], 1),
                 action=t % 2, step_type=np.where(phase == 0, 0, np.where(
                     phase == EPISODE_LENGTH - 1, 2, 1)), reward=(phase != 0) * 1.0,
                 discount=np.ones(len(t)), log_prob=np.zeros(len(t)),
                 policy_version=np.zeros(len(t), np.int64))
    recorder.add_steps({k: np.asarray(v)[:, None] for k, v in steps.items()})
    recorder.close()
    return str(directory)


def _hybrid_driver(dataset_dir, fraction):
    bindings = {"ReplayBuffer.capacity": 1000, "ReplayBuffer.min_size": 24,
                "ReplayBuffer.batch_size": 30, "ReplayBuffer.sequence_length": 1,
                "ReplayBuffer.replay_ratio": 4.0, "HybridBatches.dataset_dir": dataset_dir,
                "HybridBatches.offline_fraction": fraction}
    gin.clear_config()
    for name, value in bindings.items():
        gin.bind_parameter(name, value)
    envs = [CountingEnv(i, 3) for i in range(2)]
    try:
        return AsyncOffPolicyDriver(lambda i: envs[i], StatelessCountingPolicy(envs[0]), None,
                                    num_envs=2, unroll_length=4, exp_replayer="hybrid",
                                    env_name="Counting-v0")
    finally:
        gin.clear_config()


@pytest.mark.parametrize("fraction, offline", [(0.5, 30), (0.25, 10)])
def test_each_batch_is_the_replays_windows_then_the_datasets_and_the_share_is_reported(
        tmp_path, fraction, offline):
    driver = _hybrid_driver(_dataset(tmp_path / "ds"), fraction)
    assert driver.learn_batch_shape == (30 + offline, 1, 1)
    driver.start()
    try:
        env_steps = 0
        for _ in range(10):
            batch = driver.get_training_exps()
            observation = batch.experience.time_step.observation.numpy()[:, 0, 0]
            env_ids = batch.env_ids.numpy()
            assert (env_ids[30:] == OFFLINE_ENV_ID).all() and (env_ids[:30] >= 0).all()
            assert (observation[30:, 0] == 100).all() and (observation[:30, 0] < 100).all()
            env_steps += batch.env_steps
        assert 0 < env_steps <= driver.batches.replay.inserted_steps  # online steps only
        reported = driver.summaries()["hybrid/offline_fraction"]
    finally:
        timed_stop(driver)
    # Of the samples trained on: online windows that start at a LAST step (one step in
    # EPISODE_LENGTH) are masked, dataset windows never start there.
    expected = offline / (offline + 30 * (1 - 1 / EPISODE_LENGTH))
    assert fraction <= reported and abs(reported - expected) < 0.05, (reported, expected)


def test_the_share_counts_the_samples_a_loss_counts():
    step_type = np.array([0, 1, 2, 1, 2, 0], np.int32)[:, None, None]  # [6, 1, 1]
    env_ids = np.array([0, 0, 0, 1, OFFLINE_ENV_ID, OFFLINE_ENV_ID])
    time_step = ts.TimeStep(tf.constant(step_type), None, None, None)
    batch = LearnBatch(Experience(time_step, None, None, (), None), None, env_ids, 0)
    assert offline_share(batch) == pytest.approx(1 / 4)  # valid: 0, 1, 3 online; 5 offline


def test_a_fraction_outside_0_1_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^HybridBatches.offline_fraction must be in \(0, 1\), "
                       r"got 1.0"):
        _hybrid_driver(_dataset(tmp_path / "ds"), 1.0)
