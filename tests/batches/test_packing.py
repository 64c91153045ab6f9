"""One Reverb column per dtype: packing is lossless, and the replay table stores it."""

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches.packing import ColumnPacking
from alf_async.batches.replay_buffer import ReplayBuffer
from alf_async.batches.reverb_table import ReverbTable
from alf_async.batches.segments import segment_spec, unroll_segments
from replay_fakes import counting_unroll, unroll_spec


def _nest(rng, k):
    """A nest with three dtypes, a scalar, an empty tuple and leaves of several ranks."""
    return {"a": rng.normal(size=(5, 3)).astype(np.float32) + k,
            "b": (np.int32(k), rng.integers(0, 9, size=(5,)).astype(np.int64)),
            "c": (), "d": rng.normal(size=(5,)).astype(np.float32),
            "e": rng.integers(-3, 3, size=(2, 2, 2)).astype(np.int32)}


def test_packed_items_unpack_to_the_same_nest_in_a_batch():
    rng = np.random.default_rng(0)
    items = [_nest(rng, k) for k in range(4)]
    packing = ColumnPacking(tf.nest.map_structure(
        lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype)), items[0]))
    assert sorted(packing.spec) == ["float32", "int32", "int64"]
    assert packing.spec["float32"].shape == [5 * 3 + 5]
    assert packing.spec["int32"].shape == [1 + 8]
    packed = [packing.pack(item) for item in items]
    batch = {name: tf.constant(np.stack([p[name] for p in packed])) for name in packing.spec}
    unpacked = packing.unpack(batch)
    tf.nest.assert_same_structure(unpacked, items[0])
    for got, *want in zip(tf.nest.flatten(unpacked), *map(tf.nest.flatten, items)):
        assert got.dtype == want[0].dtype and got.shape[1:] == want[0].shape
        np.testing.assert_array_equal(got.numpy(), np.stack(want))


def test_a_segment_round_trips_through_its_packing():
    segments = unroll_segments(counting_unroll(7, env_id=2))
    packing = ColumnPacking(segment_spec(unroll_spec()))
    batch = {name: tf.constant(np.stack([packing.pack(s)[name] for s in segments]))
             for name in packing.spec}
    for got, *want in zip(tf.nest.flatten(packing.unpack(batch)),
                          *map(tf.nest.flatten, segments)):
        np.testing.assert_array_equal(got.numpy(), np.stack(want))


def test_the_replay_table_stores_one_column_per_dtype():
    replay = ReplayBuffer(unroll_spec(), capacity=1000, min_size=16, batch_size=8,
                          sequence_length=1, replay_ratio=4.0)
    try:
        signature = replay.table._client.server_info()[ReverbTable.NAME].signature
        dtypes = {leaf.dtype for leaf in tf.nest.flatten(segment_spec(unroll_spec()))}
        assert len(tf.nest.flatten(signature)) == len(dtypes)
    finally:
        replay.close()


def test_a_shape_that_is_not_static_is_refused():
    with pytest.raises(ValueError, match="static shapes"):
        ColumnPacking({"x": tf.TensorSpec([None, 3], tf.float32)})
