import numpy as np
import tensorflow as tf

from alf_async.algorithms import layout

Q, T, B = 2, 3, 4


def test_time_major_puts_unrolls_side_by_side_with_the_bootstrap_last():
    x = np.arange(Q * T * B).reshape(Q, T, B)
    boot = 100 + np.arange(Q * B).reshape(Q, B)
    tm = layout.time_major_with_bootstrap(tf.constant(x), tf.constant(boot)).numpy()
    assert tm.shape == (T + 1, Q * B)
    np.testing.assert_array_equal(tm[:T, B:2 * B], x[1])  # column block = unroll
    np.testing.assert_array_equal(tm[T], boot.reshape(-1))
    flat = layout.flatten_time(tf.constant(tm)).numpy()
    np.testing.assert_array_equal(flat[T * Q * B:], boot.reshape(-1))
    np.testing.assert_array_equal(layout.swap_time(tf.constant(tm)).numpy(), tm.T)


def test_first_step_and_one_wide_unroll_keep_columns_aligned():
    x = np.arange(Q * T * B * 2).reshape(Q, T, B, 2)
    np.testing.assert_array_equal(layout.first_step(tf.constant(x)).numpy(),
                                  x[:, 0].reshape(Q * B, 2))
    wide = layout.one_wide_unroll(tf.constant(x)).numpy()
    assert wide.shape == (1, T, Q * B, 2)
    np.testing.assert_array_equal(wide[0, :, B:2 * B], x[1])
    steps = layout.one_wide_step(tf.constant(x[:, 0])).numpy()
    np.testing.assert_array_equal(steps[0], wide[0, 0])
