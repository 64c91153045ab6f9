"""A2C: the plain policy gradient with n-step (GAE) advantages and a value baseline.

Written by following "Adding an algorithm" in docs/algorithms.md: one
`preprocess` (learn batch -> samples) and one `loss` (samples -> per-sample
terms); acting, networks, normalisation and the learner are inherited.
"""

from typing import Dict

import gin
import tensorflow as tf

from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms.actor_critic import ActorCriticAlgorithm, Samples


@gin.configurable(module="alf_async")
class A2cAlgorithm(ActorCriticAlgorithm):
    """Advantage actor-critic: `-log pi(a|s) * A` plus the value and entropy terms.

    It has no correction for stale data: with `max_policy_lag` (FreshBatches) at 0
    or 1 and one pass over each batch (`Learner.num_epochs = 1`) it is A2C as
    published; asynchronous collection makes it A3C-like.
    """

    def __init__(self, time_step_spec, action_spec, gae_lambda: float = 1.0,
                 name: str = "a2c", **kwargs):
        """
        Args:
            time_step_spec, action_spec: unbatched tf-agents specs of one sub-env.
            gae_lambda: GAE's lambda (1.0: the unroll's n-step returns, as in A2C).
            **kwargs: `ActorCriticAlgorithm` settings.
        """
        super().__init__(time_step_spec, action_spec, name=name, **kwargs)
        self._lambda = gae_lambda

    # ---- ALGO LOGIC: what A2C computes (everything else is inherited plumbing) ----
    def preprocess(self, experience, bootstrap) -> Samples:
        """Samples with advantages and value targets; leaves `[Q, T, B, ...]` in,
        `[T * Q * B, ...]` (or `[Q * B, T, ...]` when recurrent) out."""
        steps, values, mask = self._sequences(experience, bootstrap)
        advantage = adv_lib.generalized_advantage_estimation(
            steps.reward, steps.discount, steps.step_type, values, self._gamma, self._lambda)
        return self._samples(experience, steps, mask, advantage=advantage,
                             value_target=advantage + values[:-1])

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample terms (`[N]` or `[N, T]`); `loss` is minimised."""
        dist, values = self._evaluate(samples)
        pg_loss = -dist.log_prob(samples["action"]) * tf.stop_gradient(samples["advantage"])
        return self._total(pg_loss, values, samples["value_target"], dist.entropy())
