"""Sampling shapes: what a learn batch cuts from S sampled segments."""

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches.segments import SequenceSplitter, stack_segments, unroll_segments
from alf_async.batches.shapes import EveryWindow, RandomWindows, WholeSequences
from replay_fakes import B, T, counting_unroll as _unroll, unroll_spec


def _segments(unrolls=2):
    """`unrolls * B` segments, leaves `[S, ...]`: segment s's step t holds reward
    `1000 * (s // B) + 100 * (s % B) + t`."""
    return tf.nest.map_structure(tf.constant, stack_segments(
        [segment for k in range(unrolls) for segment in unroll_segments(_unroll(1000 * k))]))


def _firsts(windows):
    return windows.experience.time_step.reward.numpy()[:, 0, 0]


def test_random_windows_are_one_run_of_steps_of_each_segment():
    shape = RandomWindows(batch_size=2 * B, unroll_length=T, sequence_length=3)
    windows = shape.cut(_segments())
    reward = windows.experience.time_step.reward.numpy()[:, :, 0]
    assert reward.shape == (2 * B, 3) and shape.batch_shape == (2 * B, 3, 1)
    segment_base = np.array([0, 100, 1000, 1100])
    starts = reward[:, 0] - segment_base  # window i comes from segment i
    assert ((0 <= starts) & (starts < T)).all()
    ends_inside = starts + 2 < T  # those past the end repeat the bootstrap step
    np.testing.assert_array_equal(reward[ends_inside], reward[ends_inside][:, :1] + [0, 1, 2])
    assert shape.items_per_batch == 2 * B and shape.windows_per_item == 1
    assert shape.describe() == f"{2 * B} windows of 3 steps"


def test_every_window_is_item_major_and_each_segment_gives_all_its_starts():
    shape = EveryWindow(batch_size=2 * T, unroll_length=T, sequence_length=2)
    windows = shape.cut(_segments(unrolls=1))  # B = 2 segments: 2 * T windows
    np.testing.assert_array_equal(_firsts(windows),
                                  np.concatenate([np.arange(T), 100 + np.arange(T)]))
    assert shape.items_per_batch == 2 and shape.windows_per_item == T
    assert shape.batch_shape == (2 * T, 2, 1)
    assert shape.describe() == f"2 segments x {T} windows of 2 steps"


def test_whole_sequences_are_the_prefixed_segments_from_their_stored_state():
    spec = unroll_spec(state_size=3)
    prefix = 2
    splitter = SequenceSplitter(prefix)
    state = lambda k: (np.full((T, B, 3), k, np.float32),)
    unrolls = [_unroll(1000 * k)._replace(experience=_unroll(1000 * k).experience._replace(
        policy_state=state(k))) for k in range(2)]
    segments = [s for unroll in unrolls for s in splitter.split(unroll)]  # the second's B
    shape = WholeSequences(batch_size=B * T, unroll_length=T, prefix=prefix,
                           state_structure=spec.experience.policy_state)
    sequences = shape.cut(tf.nest.map_structure(tf.constant, stack_segments(segments)))
    reward = sequences.experience.time_step.reward.numpy()[:, :, 0]
    assert reward.shape == (B, prefix + T) and shape.batch_shape == (B, prefix + T, 1)
    np.testing.assert_array_equal(reward[0], np.arange(T - prefix, T).tolist()
                                  + (1000 + np.arange(T)).tolist())
    assert shape.describe() == f"{B} sequences of {prefix} burn-in + {T} steps"


@pytest.mark.parametrize("make", [
    lambda: EveryWindow(batch_size=T + 1, unroll_length=T, sequence_length=1),
    lambda: WholeSequences(batch_size=T + 1, unroll_length=T, prefix=0, state_structure=()),
])
def test_a_batch_that_is_not_whole_segments_names_both_settings(make):
    with pytest.raises(ValueError, match=rf"ReplayBuffer.batch_size={T + 1} must be a multiple "
                                         rf"of AsyncOffPolicyDriver.unroll_length={T}"):
        make()
