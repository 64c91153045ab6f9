"""Segments and the windows cut from them."""

import numpy as np
import tensorflow as tf

from alf_async.batches.segments import SequenceSplitter, cut_windows, unroll_segments
from replay_fakes import B, LAST, MID, T, counting_unroll as _unroll


def test_segments_are_columns_with_their_bootstrap():
    segments = unroll_segments(_unroll(10, env_id=3))
    assert len(segments) == B
    np.testing.assert_array_equal(segments[1].time_step.reward, 110 + np.arange(T + 1))
    np.testing.assert_array_equal(segments[1].action, 110 + np.arange(T))
    assert segments[0].time_step.observation.shape == (T + 1, 2) and segments[1].env_id == 3


def _stacked(segments):
    return tf.nest.map_structure(lambda *x: tf.constant(np.stack(x)), *segments)


def test_windows_take_the_steps_after_their_start_and_the_next_as_bootstrap():
    segments = _stacked(unroll_segments(_unroll(0)))
    windows = cut_windows(segments, tf.constant([0, 2]), length=3)
    reward = windows.experience.time_step.reward.numpy()
    assert reward.shape == (2, 3, 1)
    np.testing.assert_array_equal(reward[:, :, 0], [[0, 1, 2], [102, 103, 104]])
    np.testing.assert_array_equal(windows.bootstrap.reward.numpy()[:, 0], [3, 105])
    np.testing.assert_array_equal(windows.experience.action.numpy()[:, :, 0],
                                  [[0, 1, 2], [102, 103, 104]])
    assert (windows.experience.time_step.step_type.numpy() == MID).all()


def test_a_window_past_the_segment_ends_at_its_bootstrap_marked_last():
    segments = _stacked(unroll_segments(_unroll(0)))
    windows = cut_windows(segments, tf.constant([T - 1, T - 2]), length=3)
    reward = windows.experience.time_step.reward.numpy()[:, :, 0]
    step_type = windows.experience.time_step.step_type.numpy()[:, :, 0]
    # Start T-1: step T-1, then the bootstrap (step T) marked LAST, then a copy of it.
    np.testing.assert_array_equal(reward[0], [T - 1, T, T])
    np.testing.assert_array_equal(step_type[0], [MID, LAST, LAST])
    # Start T-2: steps T-2, T-1 and the bootstrap step T, marked LAST (a return stops there).
    np.testing.assert_array_equal(reward[1], [100 + T - 2, 100 + T - 1, 100 + T])
    np.testing.assert_array_equal(step_type[1], [MID, MID, LAST])
    np.testing.assert_array_equal(windows.bootstrap.reward.numpy()[:, 0], [T, 100 + T])


def _with_state(unroll):
    """The unroll with a policy state that counts steps too: `[T, B, 3]`, step t
    column b -> first + t + 100 b in every entry."""
    count = unroll.experience.time_step.reward
    state = np.repeat(count[:, :, None], 3, axis=2)
    return unroll._replace(experience=unroll.experience._replace(policy_state=(state,)))


def test_a_sequence_starts_with_the_previous_unrolls_last_steps_and_the_state_before_them():
    splitter = SequenceSplitter(prefix=3)
    assert splitter.split(_with_state(_unroll(0, env_id=5))) == []  # only a prefix so far
    assert splitter.split(_with_state(_unroll(50, env_id=6))) == []  # another stream
    segments = splitter.split(_with_state(_unroll(T, env_id=5)))
    assert len(segments) == B
    # Column 1: steps T-3 ... T-1 of the previous unroll, then T ... 2T and the bootstrap.
    np.testing.assert_array_equal(segments[1].time_step.reward,
                                  100 + np.arange(T - 3, 2 * T + 1))
    np.testing.assert_array_equal(segments[1].action, 100 + np.arange(T - 3, 2 * T))
    np.testing.assert_array_equal(segments[1].policy_state[0], [100 + T - 3] * 3)
    assert segments[0].env_id == 5 and segments[0].log_prob.shape == (T + 3,)


def test_without_a_prefix_a_sequence_is_the_segment_and_its_first_steps_state():
    segment = SequenceSplitter(prefix=0).split(_with_state(_unroll(10)))[1]
    np.testing.assert_array_equal(segment.time_step.reward, 110 + np.arange(T + 1))
    np.testing.assert_array_equal(segment.policy_state[0], [110] * 3)


def test_whole_segment_windows_carry_the_stored_state_at_every_step():
    splitter = SequenceSplitter(prefix=2)
    splitter.split(_with_state(_unroll(0)))
    segments = _stacked(splitter.split(_with_state(_unroll(T))))
    sequences = cut_windows(segments, tf.constant([0, 0]), length=T + 2)
    reward = sequences.experience.time_step.reward.numpy()[:, :, 0]
    np.testing.assert_array_equal(reward[0], np.arange(T - 2, 2 * T))
    np.testing.assert_array_equal(sequences.bootstrap.reward.numpy()[:, 0], [2 * T, 100 + 2 * T])
    state = sequences.experience.policy_state[0].numpy()
    assert state.shape == (2, T + 2, 1, 3) and (state[1] == 100 + T - 2).all()
    assert (sequences.experience.time_step.step_type.numpy() == MID).all()
