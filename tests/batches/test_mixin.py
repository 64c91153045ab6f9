"""`UnrollReplay`: the ring of recent unrolls behind IMPALA's mix-in replay."""

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches.mixin import UnrollReplay


def _unrolls(ids):
    """Unroll-like nests whose every leaf holds the unroll's id."""
    ids = tf.constant(ids, tf.int32)
    return dict(env_id=ids, data=tf.cast(ids, tf.float32)[:, None] * tf.ones([1, 4]))


def test_keeps_the_most_recent_slots_and_samples_only_them():
    replay = UnrollReplay(num_slots=3, seed=0)
    replay.add(_unrolls([0, 1]))
    replay.add(_unrolls([2, 3]))
    assert len(replay) == 3
    sample = replay.sample(50)
    assert sample["data"].shape == (50, 4)
    ids = set(sample["env_id"].numpy())
    assert ids == {1, 2, 3}  # 0 was overwritten; 50 draws hit all three
    np.testing.assert_array_equal(sample["data"].numpy()[:, 0], sample["env_id"].numpy())


def test_same_seed_same_samples():
    draws = []
    for _ in range(2):
        replay = UnrollReplay(num_slots=8, seed=5)
        replay.add(_unrolls(list(range(8))))
        draws.append(replay.sample(10)["env_id"].numpy())
    np.testing.assert_array_equal(*draws)


def test_bad_use():
    with pytest.raises(ValueError, match="replay_buffer_num_slots must be >= 1"):
        UnrollReplay(num_slots=0)
    with pytest.raises(ValueError, match="before any add"):
        UnrollReplay(num_slots=2).sample(1)
