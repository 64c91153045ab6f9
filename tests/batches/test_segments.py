"""Segments and the windows cut from them."""

import numpy as np
import tensorflow as tf

from alf_async.batches.segments import cut_windows, unroll_segments
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
