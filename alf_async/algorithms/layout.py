"""Layouts of experience tensors, and the moves between them.

A learn batch is `[Q, T, B, ...]`: Q unrolls of T steps of B sub-envs. The
estimators (GAE, V-trace) want it time-major, `[T, N, ...]` with the
`N = Q * B` sequences side by side; the learner's samples are single steps
`[T * N, ...]` (feed-forward) or sequences `[N, T, ...]` (recurrent); a
learner with several replicas splits the `Q * B` columns of `[1, T, Q * B]`.
"""

import tensorflow as tf


def time_major(x):
    """`[Q, T, B, ...]` -> `[T, Q * B, ...]`: unrolls side by side in the batch."""
    x = tf.experimental.numpy.swapaxes(x, 0, 1)
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([[shape[0], shape[1] * shape[2]], shape[3:]], 0))


def time_major_with_bootstrap(x, bootstrap_x):
    """`[Q, T, B, ...]` and `[Q, B, ...]` -> `[T + 1, Q * B, ...]`, bootstrap last."""
    return time_major(tf.concat([x, bootstrap_x[:, None]], axis=1))


def flatten_time(x):
    """`[T, N, ...]` -> `[T * N, ...]`."""
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([[shape[0] * shape[1]], shape[2:]], 0))


def swap_time(x):
    """`[T, N, ...]` <-> `[N, T, ...]`."""
    return tf.experimental.numpy.swapaxes(x, 0, 1)


def first_step(x):
    """`[Q, T, B, ...]` -> `[Q * B, ...]`: each unroll's value at its first step."""
    return tf.reshape(x[:, 0], tf.concat([[-1], tf.shape(x)[3:]], 0))


def one_wide_unroll(x):
    """`[Q, T, B, ...]` -> `[1, T, Q * B, ...]`: the Q unrolls as columns of one."""
    return time_major(x)[None]


def one_wide_step(x):
    """`[Q, B, ...]` -> `[1, Q * B, ...]` (the bootstrap steps of `one_wide_unroll`)."""
    return tf.reshape(x, tf.concat([[1, -1], tf.shape(x)[2:]], 0))
