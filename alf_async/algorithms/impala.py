"""V-trace actor-critic (IMPALA)."""

from typing import Dict, Optional

import gin
import tensorflow as tf

from alf_async.algorithms import layout
from alf_async.algorithms import vtrace
from alf_async.algorithms.actor_critic import ActorCriticAlgorithm, Samples


@gin.configurable(module="alf_async")
class ImpalaAlgorithm(ActorCriticAlgorithm):
    """Policy gradient on V-trace advantages, value regression to V-trace targets.

    Targets (`v_s`, and the advantages `r_s + gamma v_{s+1} - V(x_s)`) are
    computed once per learn batch with the weights the learner has when the
    batch arrives; more passes reuse them. The importance weight `rho_s =
    pi(a_s|x_s) / mu(a_s|x_s)` of each policy-gradient term is taken then too
    (with one SGD step per batch, IMPALA's update), or, with
    `recompute_pg_rho`, at the weights being updated at every SGD step. Reuse
    a batch only with the latter: a weight frozen at the batch's arrival
    keeps pushing `log pi(a_s)` of a negative advantage down at the same rate
    however small `pi(a_s)` gets, and repeated passes drive the policy
    deterministic; recomputed, the push fades as `pi(a_s)` falls.
    """

    def __init__(self, time_step_spec, action_spec,
                 clip_rho_threshold: Optional[float] = 1.0,
                 clip_pg_rho_threshold: Optional[float] = 1.0,
                 vtrace_lambda: float = 1.0,
                 recompute_pg_rho: bool = False,
                 name: str = "impala",
                 **kwargs):
        """
        Args:
            time_step_spec: unbatched tf-agents time-step spec of one sub-env.
            action_spec: unbatched tf-agents action spec of one sub-env.
            clip_rho_threshold: V-trace's rho-bar (None: no clipping).
            clip_pg_rho_threshold: clipping of the policy-gradient weights.
            vtrace_lambda: V-trace's lambda (1: the paper's traces; lower
                trades bias for variance, as GAE's lambda does).
            recompute_pg_rho: take the policy-gradient weights at every SGD
                step instead of once per learn batch (see above).
            **kwargs: `ActorCriticAlgorithm` settings (networks, discount,
                loss coefficients).
        """
        super().__init__(time_step_spec, action_spec, name=name, **kwargs)
        self._clip_rho = clip_rho_threshold
        self._clip_pg_rho = clip_pg_rho_threshold
        self._lambda = vtrace_lambda
        self._recompute_pg_rho = recompute_pg_rho

    # ---- ALGO LOGIC: what V-trace actor-critic computes from a batch (preprocess, loss) ----
    def preprocess(self, experience, bootstrap) -> Samples:
        """Learn batch (`[Q, T, B, ...]`, bootstrap `[Q, B, ...]`) -> samples."""
        steps, values, mask = self._sequences(experience, bootstrap)
        log_rhos = self._behaviour_log_rhos(experience, steps)
        # A transition out of a LAST step belongs to no episode: discount 0
        # and reward V(x_t) make its TD error 0, so nothing crosses it.
        rewards = mask * steps.reward[1:] + (1 - mask) * values[:-1]
        discounts = mask * self._gamma * steps.discount[1:]
        returns = vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values[:-1], values[-1],
            self._clip_rho, self._clip_pg_rho, self._lambda)
        advantage = returns.advantages if self._recompute_pg_rho else returns.pg_advantages
        return self._samples(experience, steps, mask, advantage=advantage,
                             value_target=returns.vs)

    def _behaviour_log_rhos(self, experience, steps):
        """`[T, N]` log(pi(a|x) / mu(a|x)) of the current policy pi on the unrolls."""
        action = tf.nest.map_structure(layout.time_major, experience.action)
        unroll_steps = tf.nest.map_structure(lambda x: x[:-1], steps)
        log_prob = self._over_time(
            self.actor_net, unroll_steps, self._initial_states(experience)[0],
            lambda dist, to_output: dist.log_prob(tf.nest.map_structure(to_output, action)))
        return log_prob - layout.time_major(experience.log_prob)

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample loss terms of a minibatch (`[N]` or `[N, T]`); `loss` is minimised."""
        dist, values = self._evaluate(samples)
        log_prob = dist.log_prob(samples["action"])
        advantage = samples["advantage"]  # weighted by rho already unless recomputed
        if self._recompute_pg_rho:
            rho = tf.stop_gradient(tf.exp(log_prob - samples["behaviour_log_prob"]))
            if self._clip_pg_rho is not None:
                rho = tf.minimum(self._clip_pg_rho, rho)
            advantage = rho * advantage
        pg_loss = -advantage * log_prob
        return self._total(pg_loss, values, samples["value_target"], dist.entropy())
