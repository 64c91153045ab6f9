"""Advantage and return estimators on time-major `[T + 1, N]` sequences.

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


def n_step_return(rewards, discounts, step_types, values, gamma: float):
    """The n-step return from row 0, cut where the episode ends (DQN's target).

    `G = sum_{k<h} gamma^k D_k r_{k+1} + gamma^h D_h V(s_h)`, `D_k` the
    product of `discounts[1..k]` and h = n, or the first LAST step among rows
    1..n: a truncated episode (discount 1) bootstraps from its real final
    observation, a terminated one (discount 0) does not bootstrap.

    Args:
        rewards, discounts, step_types, values: `[n + 1, N]`; `values[k]` is
            the value of step k.
        gamma: discount factor.

    Returns:
        `[N]` returns (meaningless where row 0 is LAST; mask those).
    """
    ones = tf.ones_like(rewards[:1])
    # cum[k] = prod of gamma * discount over rows 1..k (cum[0] = 1).
    cum = tf.concat([ones, tf.math.cumprod(gamma * discounts[1:], axis=0)], 0)
    # reached[k]: row k + 1 is in row 0's episode (no LAST among rows 1..k).
    not_last = tf.cast(tf.not_equal(step_types[1:-1], ts.StepType.LAST), rewards.dtype)
    reached = tf.math.cumprod(tf.concat([ones, not_last], 0), axis=0)  # [n, N]
    horizon = tf.cast(tf.reduce_sum(reached, 0), tf.int32)  # h in [1, n]
    bootstrap = tf.gather(tf.transpose(cum * values), horizon, batch_dims=1)
    return tf.reduce_sum(reached * cum[:-1] * rewards[1:], 0) + bootstrap


def n_step_returns(rewards, discounts, step_types, values, gamma: float, n: int):
    """`n_step_return` from every row of a sequence, cut at its end (R2D2's targets).

    Row T ends the sequence: a return that would run past it stops there and
    bootstraps from `values[T]` (discount permitting), as if the episode
    were truncated at row T.

    Args:
        rewards, discounts, step_types, values: `[T + 1, N]`.
        gamma: discount factor.
        n: steps of each return, >= 1.

    Returns:
        `[T, N]` returns (meaningless at LAST rows; mask those).
    """
    length = tf.shape(rewards)[0] - 1
    last = tf.equal(tf.range(length + 1), length)[:, None]
    step_types = tf.where(last, tf.cast(ts.StepType.LAST, step_types.dtype), step_types)
    rows = tf.minimum(tf.range(length)[None] + tf.range(n + 1)[:, None], length)  # [n + 1, T]
    windows = [tf.reshape(tf.gather(x, rows), [n + 1, -1])  # [n + 1, T * N]
               for x in (rewards, discounts, step_types, values)]
    return tf.reshape(n_step_return(*windows, gamma), [length, -1])
