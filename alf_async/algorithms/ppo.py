"""PPO with a clipped surrogate against the behaviour policy's log-probs."""

from typing import Dict

import gin
import tensorflow as tf

from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms.actor_critic import ActorCriticAlgorithm, Samples
from alf_async.algorithms.schedules import ScheduledValue


@gin.configurable(module="alf_async")
class PPOAlgorithm(ActorCriticAlgorithm):
    """Clipped-ratio PPO with a separate value network and GAE(lambda).

    The ratio is taken against the log-probs of the (possibly stale) policy
    that acted, so clipping also bounds how far async data pulls the policy.
    """

    def __init__(self, time_step_spec, action_spec,
                 gae_lambda: float = 0.95,
                 clip_ratio: float = 0.2,
                 name: str = "ppo",
                 **kwargs):
        """
        Args:
            time_step_spec: unbatched tf-agents time-step spec of one sub-env.
            action_spec: unbatched tf-agents action spec of one sub-env.
            gae_lambda: GAE's lambda.
            clip_ratio: epsilon of the clipped surrogate objective (mutable: a
                run may change it at a resume, `mutable_settings`).
            **kwargs: `ActorCriticAlgorithm` settings (networks, discount,
                loss coefficients).
        """
        super().__init__(time_step_spec, action_spec, name=name, **kwargs)
        self._lambda = gae_lambda
        self._clip_ratio = self._add_mutable(ScheduledValue("clip_ratio", clip_ratio))

    # ---- ALGO LOGIC: what PPO computes (everything else is inherited plumbing) ----
    def preprocess(self, experience, bootstrap) -> Samples:
        """Turns (a replica's share of) a learn batch into training samples.

        Advantages come from the current value network, once per learn batch.
        Must run in a replica context: normalisation statistics are
        all-reduced over replicas.

        Args:
            experience: `Experience`, leaves `[Q, T, B, ...]`.
            bootstrap: time step after each unroll, leaves `[Q, B, ...]`.

        Returns:
            Dict of `[T * Q * B, ...]` step tensors (`[Q * B, T, ...]`
            sequences when recurrent); `mask` is 0 at LAST steps.
        """
        steps, values, mask = self._sequences(experience, bootstrap)
        advantage = adv_lib.generalized_advantage_estimation(
            steps.reward, steps.discount, steps.step_type, values, self._gamma, self._lambda)
        value_target = advantage + values[:-1]
        return self._samples(experience, steps, mask, advantage=advantage,
                             value_target=value_target)

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample loss terms of a minibatch (`[N]` or `[N, T]`); `loss` is minimised."""
        dist, values = self._evaluate(samples)
        log_ratio = dist.log_prob(samples["action"]) - samples["behaviour_log_prob"]
        ratio = tf.exp(log_ratio)
        advantage = samples["advantage"]
        clipped = tf.clip_by_value(ratio, 1 - self._clip_ratio, 1 + self._clip_ratio)
        pg_loss = -tf.minimum(ratio * advantage, clipped * advantage)
        return dict(
            self._total(pg_loss, values, samples["value_target"], dist.entropy()),
            approx_kl=ratio - 1 - log_ratio,
            clip_fraction=tf.cast(tf.abs(ratio - 1) > self._clip_ratio, tf.float32))

