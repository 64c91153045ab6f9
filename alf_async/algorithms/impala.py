"""V-trace actor-critic (IMPALA)."""

from typing import Dict, Optional

import gin
import tensorflow as tf

from alf_async import layout
from alf_async.algorithms import vtrace
from alf_async.algorithms.actor_critic import ActorCriticAlgorithm, Samples


@gin.configurable(module="alf_async")
class ImpalaAlgorithm(ActorCriticAlgorithm):
    """Policy gradient on V-trace advantages, value regression to V-trace targets.

    Targets are computed once per learn batch with the weights the learner
    has when the batch arrives; with `num_epochs = num_minibatches = 1` this
    is IMPALA's update, more passes reuse the same targets.
    """

    def __init__(self, time_step_spec, action_spec,
                 clip_rho_threshold: Optional[float] = 1.0,
                 clip_pg_rho_threshold: Optional[float] = 1.0,
                 name: str = "impala",
                 **kwargs):
        """
        Args:
            time_step_spec, action_spec: unbatched tf-agents specs of one sub-env.
            clip_rho_threshold: V-trace's rho-bar (None: no clipping).
            clip_pg_rho_threshold: clipping of the policy-gradient weights.
            **kwargs: `ActorCriticAlgorithm` settings (networks, discount,
                loss coefficients).
        """
        super().__init__(time_step_spec, action_spec, name=name, **kwargs)
        self._clip_rho = clip_rho_threshold
        self._clip_pg_rho = clip_pg_rho_threshold

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
            self._clip_rho, self._clip_pg_rho)
        return self._samples(experience, steps, mask, advantage=returns.pg_advantages,
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
        pg_loss = -dist.log_prob(samples["action"]) * samples["advantage"]
        return self._total(pg_loss, values, samples["value_target"], dist.entropy())
