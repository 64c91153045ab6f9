"""V-trace actor-critic (IMPALA)."""

from typing import Dict, Optional

import gin
import tensorflow as tf

from alf_async.algorithms import advantages as adv_lib
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
                 normalize_advantages: bool = True,
                 name: str = "impala",
                 **kwargs):
        """
        Args:
            time_step_spec, action_spec: unbatched tf-agents specs of one sub-env.
            clip_rho_threshold: V-trace's rho-bar (None: no clipping).
            clip_pg_rho_threshold: clipping of the policy-gradient weights.
            normalize_advantages: normalise the policy-gradient advantages over
                each learn batch (keeps the step size independent of the
                reward scale).
            **kwargs: `ActorCriticAlgorithm` settings (networks, discount,
                loss coefficients).
        """
        super().__init__(time_step_spec, action_spec, name=name, **kwargs)
        self._clip_rho = clip_rho_threshold
        self._clip_pg_rho = clip_pg_rho_threshold
        self._normalize_advantages = normalize_advantages

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
        advantage = returns.pg_advantages
        if self._normalize_advantages:
            advantage = adv_lib.normalize(advantage, mask)
        return self._samples(experience, steps, mask, advantage=advantage,
                             value_target=returns.vs)

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample loss terms of a minibatch (`[N]` or `[N, T]`); `loss` is minimised."""
        dist, values = self._evaluate(samples)
        pg_loss = -dist.log_prob(samples["action"]) * samples["advantage"]
        return self._total(pg_loss, values, samples["value_target"], dist.entropy())
