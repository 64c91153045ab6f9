import numpy as np
import pytest
import tensorflow as tf
from tensorflow_datasets.core import example_serializer

from alf_async.datasets.rlds_format import to_rlds
from alf_async.datasets.writer import RldsWriter, message_field, varints
from dataset_fakes import ACTION_SPEC, OBSERVATION_SPEC, episode


@pytest.mark.parametrize("length", [2, 37])
def test_an_episodes_record_is_the_one_tfds_serializer_makes(tmp_path, length):
    writer = RldsWriter(str(tmp_path / "ds"), OBSERVATION_SPEC, ACTION_SPEC, {})
    steps = to_rlds(episode(length, True, 3))
    tfds_serializer = example_serializer.ExampleSerializer(
        writer.info.features.get_serialized_info())
    theirs = tf.train.Example.FromString(tfds_serializer.serialize_example(writer.encode(steps)))
    ours = tf.train.Example.FromString(writer.serialize(steps))
    assert ours == theirs
    assert sorted(ours.features.feature) == sorted(f"steps/{k}" for k in steps)


def test_steps_of_another_shape_are_refused(tmp_path):
    writer = RldsWriter(str(tmp_path / "ds"), OBSERVATION_SPEC, ACTION_SPEC, {})
    steps = to_rlds(episode(4, True, 0))
    steps["observation"] = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"an episode's observation has steps of shape \(3,\), "
                       r"the dataset's are \(2,\)"):
        writer.write([steps])


@pytest.mark.parametrize("values", [[0, 1, 127], [128, 300, 2 ** 31, 2 ** 63 - 1],
                                    [-1, 5, -2 ** 63], []])
def test_varints_parse_back_as_protobuf_int64_values(values):
    data = message_field(1, varints(np.array(values, np.int64)))
    assert list(tf.train.Int64List.FromString(data).value) == values
    if values:  # protobuf writes no field for an empty list
        assert data == tf.train.Int64List(value=values).SerializeToString()


def test_a_long_runs_policy_versions_and_a_long_episode_serialize_as_tfds_does(tmp_path):
    """Versions past 127 take several varint bytes; 2,000 steps make a length varint
    of two bytes and more."""
    writer = RldsWriter(str(tmp_path / "ds"), OBSERVATION_SPEC, ACTION_SPEC, {})
    steps = to_rlds(episode(2000, False, 3))
    steps["policy_version"] = steps["policy_version"] * 9_000_001
    tfds_serializer = example_serializer.ExampleSerializer(
        writer.info.features.get_serialized_info())
    theirs = tf.train.Example.FromString(tfds_serializer.serialize_example(writer.encode(steps)))
    assert tf.train.Example.FromString(writer.serialize(steps)) == theirs
