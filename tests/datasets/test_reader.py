import glob
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.rlds import rlds_base
from tf_agents.specs import array_spec

from alf_async.datasets.reader import load_steps
from alf_async.datasets.recorder import open_recorder
from alf_async.datasets.rlds_format import to_rlds
from dataset_fakes import ACTION_SPEC, OBSERVATION_SPEC, concatenated, episode

EPISODES = [episode(5, True, 1), episode(3, False, 2), episode(6, True, 3)]


def _recorded(directory, episodes=EPISODES, steps_per_shard=1):
    recorder = open_recorder(str(directory), "Fake-v0", OBSERVATION_SPEC, ACTION_SPEC,
                             dict(kind="train", root_dir="/r"), None, steps_per_shard)
    for e in episodes:  # one column, one episode per add
        recorder.add_steps({k: v[:, None] for k, v in e.items()})
    recorder.close()
    return str(directory)


def _another_tools(directory, with_action=True):
    """A dataset written by TFDS's own RLDS writer, without our policy fields."""
    config = rlds_base.DatasetConfig(
        name="theirs", observation_info=tfds.features.Tensor(shape=(2,), dtype=np.float32),
        action_info=tfds.features.Tensor(shape=(), dtype=np.int64) if with_action else None,
        reward_info=np.float32, discount_info=np.float32)
    os.makedirs(directory)
    info = rlds_base.build_info(config, tfds.core.DatasetIdentity(
        name="theirs", version="1.0.0", data_dir=str(directory), module_name=""))
    writer = tfds.core.SequentialWriter(info, max_examples_per_shard=10)
    writer.initialize_splits(["train"])
    steps = to_rlds(EPISODES[0])
    keep = ["observation", "reward", "discount", "is_first", "is_last", "is_terminal"]
    fields = keep + ["action"] * with_action
    writer.add_examples({"train": [{"steps": {k: steps[k] for k in fields}}]})
    writer.close_all()
    return str(directory)


def test_the_steps_come_back_in_order_with_their_episodes_ends(tmp_path):
    steps = load_steps(_recorded(tmp_path / "ds"), OBSERVATION_SPEC, ACTION_SPEC, "Fake-v0")
    expected = concatenated(EPISODES)
    for key, value in expected.items():
        np.testing.assert_array_equal(steps.fields[key], value, err_msg=key)
    assert steps.episode_last.tolist() == [4] * 5 + [7] * 3 + [13] * 6
    assert steps.num_episodes == 3 and steps.metadata["env_name"] == "Fake-v0"


def test_another_tools_rlds_dataset_is_read_with_zero_policy_fields(tmp_path):
    steps = load_steps(_another_tools(tmp_path / "theirs"), OBSERVATION_SPEC, ACTION_SPEC,
                       "Fake-v0")  # it names no env: not checked
    np.testing.assert_array_equal(steps.fields["reward"], EPISODES[0]["reward"])
    assert not steps.fields["log_prob"].any() and steps.metadata == {}


@pytest.mark.parametrize("case, message", [
    ("missing", r"^DatasetBatches.dataset_dir=.*/none is not a dataset directory \(no "
                r"dataset_info.json there\)$"),
    ("env", r"^DatasetBatches.dataset_dir=.*/ds was recorded on Fake-v0, not on this run's "
            r"CartPole-v1$"),
    ("observation", r"^DatasetBatches.dataset_dir=.*/ds holds observations of shape \(2,\) and "
                    r"dtype float32; this run's observation spec is \(4,\) float32$"),
    ("action", r"holds actions of shape \(\) and dtype int64; this run's action spec is \(1,\) "
               r"float32$"),
    ("no action", r"^DatasetBatches.dataset_dir=.*/theirs has no step field 'action', which "
                  r"learning from it needs"),
])
def test_a_dataset_that_does_not_fit_the_run_is_one_line(tmp_path, case, message):
    observation, action, env = OBSERVATION_SPEC, ACTION_SPEC, "Fake-v0"
    directory = _recorded(tmp_path / "ds")
    if case == "missing":
        directory = str(tmp_path / "none")
    elif case == "env":
        env = "CartPole-v1"
    elif case == "observation":
        observation = array_spec.ArraySpec((4,), np.float32)
    elif case == "action":
        action = array_spec.BoundedArraySpec((1,), np.float32, -1, 1)
    else:
        directory = _another_tools(tmp_path / "theirs", with_action=False)
    with pytest.raises(ValueError, match=message):
        load_steps(directory, observation, action, env)


def test_a_truncated_shard_is_named_not_a_stack_trace(tmp_path):
    directory = _recorded(tmp_path / "ds")
    shards = sorted(glob.glob(os.path.join(directory, "*.tfrecord-*")))
    assert len(shards) == 3
    with open(shards[1], "r+b") as f:
        f.truncate(os.path.getsize(shards[1]) - 7)
    with pytest.raises(ValueError, match=r"^DatasetBatches.dataset_dir=.*/ds: shard "
                       r"alf_async_episodes-train.tfrecord-00001 cannot be read "
                       r"\(DataLossError: .*\)$"):
        load_steps(directory, OBSERVATION_SPEC, ACTION_SPEC)


def test_several_datasets_are_read_as_one_mixed_dataset_in_their_order(tmp_path):
    first = _recorded(tmp_path / "a", EPISODES[:2])
    second = _recorded(tmp_path / "b", EPISODES[2:])
    steps = load_steps([first, second], OBSERVATION_SPEC, ACTION_SPEC, "Fake-v0")
    for key, value in concatenated(EPISODES).items():
        np.testing.assert_array_equal(steps.fields[key], value, err_msg=key)
    assert steps.episode_last.tolist() == [4] * 5 + [7] * 3 + [13] * 6  # ends shifted
    assert [part["episodes"] for part in steps.metadata["parts"]] == [2, 1]


def test_a_mixed_dataset_with_one_of_another_env_names_that_one(tmp_path):
    ours = _recorded(tmp_path / "a")
    recorder = open_recorder(str(tmp_path / "other"), "Other-v0", OBSERVATION_SPEC, ACTION_SPEC,
                             dict(kind="train", root_dir="/r"), None, 1)
    recorder.add_steps({k: v[:, None] for k, v in EPISODES[0].items()})
    recorder.close()
    with pytest.raises(ValueError, match=r"other was recorded on Other-v0, not on this "
                                         r"run's Fake-v0"):
        load_steps([ours, str(tmp_path / "other")], OBSERVATION_SPEC, ACTION_SPEC, "Fake-v0")
