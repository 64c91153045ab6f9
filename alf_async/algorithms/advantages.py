"""Advantage estimators on time-major `[T + 1, N]` sequences.

Index `t` follows the time-step convention of `alf_async.experience`: step
`t + 1` carries the reward and discount of the transition out of step `t`,
and row `T` is the bootstrap step that follows the unroll. A transition out
of a `LAST` step crosses an episode boundary and gets advantage 0.
"""

import tensorflow as tf
from tf_agents.trajectories import time_step as ts


def transition_mask(step_types):
    """`[T + 1, N]` step types -> `[T, N]` float, 1 where step t is not LAST."""
    return tf.cast(tf.not_equal(step_types[:-1], ts.StepType.LAST), tf.float32)


def generalized_advantage_estimation(rewards, discounts, step_types, values, gamma: float,
                                     lambda_: float):
    """GAE(lambda), bootstrapped from the value of the step after the unroll.

    Args:
        rewards, discounts, step_types: `[T + 1, N]`.
        values: `[T + 1, N]` state values V(s_t); row T is the bootstrap.
        gamma: discount factor.
        lambda_: GAE's lambda.

    Returns:
        `[T, N]` advantages; 0 at LAST steps. The last row's estimate is the
        one-step TD error from the bootstrap value, not zero.
    """
    valid = transition_mask(step_types)
    next_discount = gamma * discounts[1:] * valid
    deltas = valid * (rewards[1:] - values[:-1]) + next_discount * values[1:]
    coefs = lambda_ * next_discount
    return tf.scan(lambda acc, x: x[0] + x[1] * acc, (deltas, coefs),
                   initializer=tf.zeros_like(values[0]), reverse=True)



def normalize(x, mask, epsilon: float = 1e-8):
    """Normalises `x` to mean 0 and std 1 over entries where `mask` is 1.

    Statistics are all-reduced over the replicas of the current replica
    context, so every replica normalises with the same global moments.
    """
    ctx = tf.distribute.get_replica_context()
    total, total_sq, count = ctx.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [tf.reduce_sum(x * mask), tf.reduce_sum(tf.square(x) * mask), tf.reduce_sum(mask)])
    count = tf.maximum(count, 1.0)
    mean = total / count
    var = tf.maximum(total_sq / count - tf.square(mean), 0.0)
    return (x - mean) * tf.math.rsqrt(var + epsilon) * mask
