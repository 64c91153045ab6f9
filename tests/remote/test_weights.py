"""The weights table: publish, pull, versions and mismatches."""

import numpy as np
import pytest
import tensorflow as tf

reverb = pytest.importorskip("reverb")

from alf_async.remote import weights  # noqa: E402


@pytest.fixture
def client():
    server = reverb.Server([weights.weights_table()])
    yield reverb.Client(f"127.0.0.1:{server.port}")
    server.stop()


def _variables(seed):
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.normal(size=(3, 2)).astype(np.float32)),
            tf.Variable(np.int64(seed))]


def test_pull_reads_the_newest_published_weights_and_their_stamp(client):
    source, target = _variables(1), _variables(2)
    assert weights.pull(client, target, timeout_secs=5) is None  # nothing published yet
    weights.publish(client, _variables(3), weights.Stamp(7, 4, 8))
    weights.publish(client, source, weights.Stamp(7, 5, 8))
    assert weights.pull(client, target, timeout_secs=5) == weights.Stamp(7, 5, 8)
    for a, b in zip(source, target):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_pull_skips_weights_that_are_not_newer_unless_the_learner_restarted(client):
    target = _variables(2)
    weights.publish(client, _variables(1), weights.Stamp(7, 5, 8))
    assert weights.pull(client, target, 5, last=weights.Stamp(7, 5, 8)) is None
    np.testing.assert_array_equal(target[0].numpy(), _variables(2)[0].numpy())
    # A restarted learner (another id) resumed from an older checkpoint: taken.
    weights.publish(client, _variables(3), weights.Stamp(9, 2, 8))
    assert weights.pull(client, target, 5, last=weights.Stamp(7, 5, 8)) == (9, 2, 8)
    np.testing.assert_array_equal(target[0].numpy(), _variables(3)[0].numpy())


def test_weights_of_another_model_are_refused_with_the_reason(client):
    weights.publish(client, [tf.Variable(np.zeros((4, 2), np.float32))], weights.Stamp(7, 1, 8))
    with pytest.raises(weights.IncompatibleWeights, match="learner's --gin_file"):
        weights.pull(client, [tf.Variable(np.zeros((3, 2), np.float32))], timeout_secs=5)
