import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.batches.dataset import OFFLINE_ENV_ID, DatasetBatches, PackedColumns
from alf_async.datasets.recorder import open_recorder
from alf_async.experience import make_specs
from dataset_fakes import (ACTION_SPEC, OBSERVATION_SPEC, algorithm_stub, concatenated,
                                 episode)
from fakes import CountingEnv, EPISODE_LENGTH, gin_bound, learning_driver, timed_stop

EPISODES = [episode(n, n % 2 == 0, tag) for tag, n in enumerate((5, 3, 8, 2, 6))]


def _dataset(directory):
    recorder = open_recorder(str(directory), "Fake-v0", OBSERVATION_SPEC, ACTION_SPEC,
                             dict(kind="train", root_dir="/r"))
    for e in EPISODES:
        recorder.add_steps({k: v[:, None] for k, v in e.items()})
    recorder.close()
    return str(directory)


def _unroll_spec():
    return make_specs(ts.time_step_spec(OBSERVATION_SPEC), ACTION_SPEC, (), 1, 1)[2]


def test_an_epoch_of_batches_holds_every_step_once_as_the_dataset_has_it(tmp_path):
    source = DatasetBatches(_unroll_spec(), algorithm_stub(), "Fake-v0", seed=2,
                            dataset_dir=_dataset(tmp_path / "ds"), batch_size=4,
                            sequence_length=2)
    assert source.shape(8, 16) == (4, 2, 1)
    steps = concatenated(EPISODES)
    starts = []
    transitions = sum(len(e["step_type"]) - 1 for e in EPISODES)  # 19: every step but LAST
    for _ in range(transitions // 4):  # 4 full batches of one epoch
        batch = source.next()
        assert batch.env_steps == 0 and batch.env_ids.numpy().tolist() == [OFFLINE_ENV_ID] * 4
        observation = batch.experience.time_step.observation.numpy()  # [4, 2, 1, 2]
        after = batch.bootstrap.observation.numpy()  # [4, 1, 2]
        for window, following in zip(observation[:, :, 0], after[:, 0]):
            tag, t = window[0]
            episode_steps = EPISODES[int(tag)]
            length = len(episode_steps["step_type"])
            rows = [min(int(t) + k, length - 1) for k in range(3)]  # clipped at its LAST
            np.testing.assert_array_equal(np.vstack([window, following]),
                                          episode_steps["observation"][rows])
            starts.append((int(tag), int(t)))
        assert batch.experience.action.dtype == tf.int64
    np.testing.assert_array_equal(  # the dataset's rewards, in this project's convention
        source.sampler.steps.fields["reward"], steps["reward"])
    assert len(set(starts)) == len(starts) == 16 and source.summaries()["dataset/epoch"] == 1.0
    assert all(t < len(EPISODES[tag]["step_type"]) - 1 for tag, t in starts)  # never a LAST


def test_packed_columns_gather_each_field_as_indexing_it_alone_would():
    """Fields of one dtype share a matrix; frames, scalars and vectors come back whole."""
    rng = np.random.default_rng(0)
    fields = dict(frame=rng.integers(0, 255, (9, 2, 3), dtype=np.uint8),
                  reward=rng.normal(size=9).astype(np.float32),
                  observation=rng.normal(size=(9, 4)).astype(np.float32),
                  action=rng.integers(0, 5, 9), step_type=np.arange(9, dtype=np.int32),
                  other_frame=rng.integers(0, 255, (9, 5), dtype=np.uint8))
    rows = np.array([[[8, 0], [3, 3]], [[1, 2], [7, 6]]])  # [2, 2, 2]
    gathered = tf.function(PackedColumns(fields).gather, autograph=False)(tf.constant(rows))
    assert set(gathered) == set(fields)
    for key, value in fields.items():
        assert gathered[key].dtype == value.dtype
        np.testing.assert_array_equal(gathered[key].numpy(), value[rows])


def test_a_recurrent_algorithm_and_no_directory_are_refused_in_one_line(tmp_path):
    directory = _dataset(tmp_path / "ds")
    with pytest.raises(ValueError, match="^DatasetBatches.dataset_dir: SimpleNamespace is "
                       "recurrent and needs stored policy states, which a dataset does not hold"):
        DatasetBatches(_unroll_spec(), algorithm_stub(recurrent=True), dataset_dir=directory)
    with pytest.raises(ValueError, match="^DatasetBatches.dataset_dir is needed to learn from a "
                       "dataset"):
        DatasetBatches(_unroll_spec(), algorithm_stub())
    with pytest.raises(ValueError, match="^DatasetBatches.batch_size must be an integer >= 1"):
        DatasetBatches(_unroll_spec(), algorithm_stub(), dataset_dir=directory, batch_size=0)


def test_what_a_driver_recorded_a_dataset_driver_learns_from(tmp_path):
    """The whole path: env threads' unrolls recorded by the log thread, then a driver
    whose learn batches are that dataset's windows (exp_replayer='dataset')."""
    version, env = tf.Variable(0, dtype=tf.int64), CountingEnv(0)
    recorder = open_recorder(str(tmp_path / "ds"), "Counting-v0", env.observation_spec(),
                             env.action_spec(), dict(kind="train", root_dir=str(tmp_path)))
    driver = learning_driver(version, recorder=recorder)
    try:
        driver.start()
        for _ in range(6):
            driver.get_training_exps()
    finally:
        timed_stop(driver, bound=5.0)
    assert recorder.writer.episodes >= 6 and recorder.writer.steps == 5 * recorder.writer.episodes
    envs = [CountingEnv(i) for i in range(2)]
    dataset = learning_driver(version, exp_replayer="dataset", env_name="Counting-v0",
                              envs=envs,
                              bindings={"DatasetBatches.dataset_dir": str(tmp_path / "ds"),
                                        "DatasetBatches.batch_size": 8})
    try:
        dataset.start()
        for _ in range(3):
            dataset.get_training_exps()
        batch = dataset.get_training_exps()
        assert [e.count for e in envs] == [0, 0]  # offline: no env thread steps its env
        observation = batch.experience.time_step.observation.numpy()[:, 0, 0]  # [8, 3]
        following = batch.bootstrap.observation.numpy()[:, 0]
        np.testing.assert_array_equal(following[:, :2], observation[:, :2])  # same sub-env
        np.testing.assert_array_equal(following[:, 2], observation[:, 2] + 1)  # next step
        assert (observation[:, 2] % EPISODE_LENGTH != EPISODE_LENGTH - 1).all()  # no LAST
        # The policy's action and behaviour log-prob at each step, as recorded.
        np.testing.assert_array_equal(batch.experience.action.numpy()[:, 0, 0],
                                      observation[:, 2] % 2)
        np.testing.assert_array_equal(batch.experience.log_prob.numpy()[:, 0, 0],
                                      -observation[:, 2])
    finally:
        timed_stop(dataset)
    with gin_bound({}), pytest.raises(ValueError, match="recorded on Counting-v0, not on this "
                                      "run's CartPole-v1"):
        learning_driver(version, exp_replayer="dataset", env_name="CartPole-v1",
                        bindings={"DatasetBatches.dataset_dir": str(tmp_path / "ds")})
