"""V-trace off-policy targets (Espeholt et al. 2018, IMPALA, eq. 1).

All tensors are time-major `[T, B]` with the usual transition convention:
`rewards[t]` and `discounts[t]` belong to the transition out of state `x_t`,
`values[t] = V(x_t)` and `bootstrap_value = V(x_T)`.
"""

from typing import NamedTuple, Optional

import tensorflow as tf


class VTraceReturns(NamedTuple):
    vs: tf.Tensor             # [T, B] value targets v_s
    pg_advantages: tf.Tensor  # [T, B] rho_s (r_s + gamma_s v_{s+1} - V(x_s))
    advantages: tf.Tensor     # [T, B] r_s + gamma_s v_{s+1} - V(x_s), before the weight rho_s


def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold: Optional[float] = 1.0,
                            clip_pg_rho_threshold: Optional[float] = 1.0,
                            lambda_: float = 1.0) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages.

    Args:
        log_rhos: `[T, B]` log(pi(a_t|x_t) / mu(a_t|x_t)), target over behaviour.
        discounts: `[T, B]` gamma times the transition's discount (0 at a
            terminal transition).
        rewards: `[T, B]`.
        values: `[T, B]` V(x_t) under the target policy's critic.
        bootstrap_value: `[B]` V(x_T).
        clip_rho_threshold: rho-bar, clipping the weights of the TD errors
            (None: no clipping).
        clip_pg_rho_threshold: clipping of the weights of the policy-gradient
            advantages (None: no clipping).
        lambda_: trace weight: c_i = lambda * min(1, rho_i), and the
            policy-gradient target mixes `lambda * v_{s+1} + (1 - lambda) *
            V(x_{s+1})`. On-policy this is GAE(lambda); 1 is the paper's V-trace.

    Returns:
        `VTraceReturns`; no gradient flows through them.
    """
    rhos = tf.exp(log_rhos)
    clip = lambda x, c: x if c is None else tf.minimum(c, x)
    clipped_rhos = clip(rhos, clip_rho_threshold)
    cs = lambda_ * tf.minimum(1.0, rhos)  # trace-cutting coefficients c_i, c-bar = 1
    next_values = tf.concat([values[1:], bootstrap_value[None]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)
    # v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1}))
    vs_minus_v = tf.scan(lambda acc, x: x[0] + x[1] * acc, (deltas, discounts * cs),
                         initializer=tf.zeros_like(bootstrap_value), reverse=True)
    vs = vs_minus_v + values
    next_vs = tf.concat([vs[1:], bootstrap_value[None]], axis=0)
    next_vs = lambda_ * next_vs + (1 - lambda_) * next_values
    advantages = rewards + discounts * next_vs - values
    pg_advantages = clip(rhos, clip_pg_rho_threshold) * advantages
    return VTraceReturns(*map(tf.stop_gradient, (vs, pg_advantages, advantages)))
