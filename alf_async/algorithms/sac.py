"""Soft actor-critic, learning from uniform replay."""

from typing import Dict, Optional, Sequence

import gin
import numpy as np
import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.algorithms import layout

from alf_async.algorithms import networks
from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms.contract import Stateless
from alf_async.algorithms.target_networks import TargetUpdater

Samples = Dict[str, tf.Tensor]


@gin.configurable(module="alf_async")
class SacAlgorithm(Stateless, tf.Module):
    """SAC: twin critics with Polyak-averaged targets, a squashed Gaussian policy and
    an entropy temperature tuned toward `target_entropy`.

    Each transition `(s, a, r, s')` of a replayed window is a sample:
    - critics: `Q_i(s, a)` regressed to `r + gamma * discount * (min_i
      Q_target_i(s', a') - alpha * log pi(a'|s'))`, `a' ~ pi(s')`;
    - actor: minimise `alpha * log pi(a~|s) - min_i Q_i(s, a~)`, `a~ ~ pi(s)`
      reparameterised;
    - temperature: minimise `-log(alpha) * (log pi(a~|s) + target_entropy)`.
    Each term trains only its own variables (`loss_groups`).

    Thread-safety: as `ActorCriticAlgorithm`: actors read the policy's
    variables while the learner's optimizer writes them.
    """

    def __init__(self, time_step_spec, action_spec,
                 actor_fc_layers: Sequence[int] = (256, 256),
                 critic_fc_layers: Sequence[int] = (256, 256),
                 activation: str = "relu",
                 discount: float = 0.99,
                 target_update_tau: float = 0.005,
                 target_update_period: int = 1,
                 initial_alpha: float = 1.0,
                 target_entropy: Optional[float] = None,
                 reward_scale: float = 1.0,
                 name: str = "sac"):
        """
        Args:
            time_step_spec: unbatched tf-agents time-step spec of one sub-env.
            action_spec: unbatched action spec: a bounded float vector.
            actor_fc_layers: the actor's hidden layer sizes.
            critic_fc_layers: each critic's hidden layer sizes.
            activation: name of a Keras activation for the hidden layers.
            discount: gamma.
            target_update_tau: the target critics move this fraction of the
                way to the critics ...
            target_update_period: ... every this many optimizer steps.
            initial_alpha: the entropy temperature to start from.
            target_entropy: the policy entropy alpha is tuned toward (None:
                minus the number of action dimensions).
            reward_scale: rewards are multiplied by this for learning.

        Raises:
            ValueError: the action is not a float vector.
        """
        super().__init__(name=name)
        self.time_step_spec = tensor_spec.from_spec(time_step_spec)
        self.action_spec = tensor_spec.from_spec(action_spec)
        if not self.action_spec.dtype.is_floating:
            raise ValueError(f"SacAlgorithm needs a Box action space, got {self.action_spec}")
        obs_spec = self.time_step_spec.observation
        self.actor_net, self.critics, self.target_critics = (
            networks.squashed_actor_and_critics(obs_spec, self.action_spec, actor_fc_layers,
                                                critic_fc_layers, activation))
        self.item_terms = ("td_error",)  # prioritized replay's errors: the critics'
        self._gamma = discount
        self._reward_scale = reward_scale
        self.log_alpha = tf.Variable(np.log(initial_alpha), dtype=tf.float32, name="log_alpha")
        self._target_entropy = (-float(np.prod(self.action_spec.shape))
                                if target_entropy is None else target_entropy)
        self._critic_variables = [v for c in self.critics for v in c.trainable_variables]
        self._target = TargetUpdater(
            [v for c in self.critics for v in c.variables],
            [v for c in self.target_critics for v in c.variables],
            target_update_tau, target_update_period)

    @property
    def entropy_coeff(self):
        """alpha, the entropy temperature."""
        return tf.exp(self.log_alpha)

    def scalars(self):
        return {"entropy_coeff": self.entropy_coeff}

    @property
    def loss_groups(self):
        """Critics, actor and temperature each minimise their own term."""
        return [("critic_loss", self._critic_variables),
                ("actor_loss", self.actor_net.trainable_variables),
                ("alpha_loss", [self.log_alpha])]

    @property
    def variables_to_train(self):
        return [v for _, group in self.loss_groups for v in group]

    def act(self, observation, step_type, policy_state, greedy: bool = False, seed=None,
            env_id=None):
        """Samples (or, `greedy`, takes the mode of) the policy for `[N, ...]` observations.

        Returns:
            `(action, (), log_prob)`.
        """
        action, log_prob = networks.policy_action(self.actor_net, observation, step_type,
                                                  greedy, seed)
        return action, policy_state, log_prob

    # ---- ALGO LOGIC: what SAC computes from a batch (preprocess, loss) ----
    def preprocess(self, experience, bootstrap) -> Samples:
        """Windows `[S, L, 1, ...]` (bootstrap `[S, 1, ...]`) -> `[L * S]` transitions."""
        steps = tf.nest.map_structure(layout.time_major_with_bootstrap,
                                      experience.time_step, bootstrap)  # [L + 1, S]
        now = lambda x: layout.flatten_time(x[:-1])
        later = lambda x: layout.flatten_time(x[1:])
        return dict(observation=tf.nest.map_structure(now, steps.observation),
                    action=tf.nest.map_structure(
                        lambda x: layout.flatten_time(layout.time_major(x)), experience.action),
                    reward=later(steps.reward) * self._reward_scale,
                    discount=later(steps.discount),
                    next_observation=tf.nest.map_structure(later, steps.observation),
                    mask=layout.flatten_time(adv_lib.transition_mask(steps.step_type)))

    @staticmethod
    def _sample(dist):
        """The loss's action samples (reparameterised; tests replace it by the mode)."""
        return dist.sample()

    @staticmethod
    def _q_values(critics, observation, action):
        """`[len(critics), N]`: each critic's Q(s, a)."""
        return tf.stack([critic((observation, action), step_type=None, training=True)[0]
                         for critic in critics])

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample loss terms of a minibatch (`[N]`); `loss` is their sum."""
        alpha = tf.exp(self.log_alpha)
        next_dist, _ = self.actor_net(samples["next_observation"], step_type=None, network_state=(),
                                      training=True)
        next_action = self._sample(next_dist)
        next_q = self._q_values(self.target_critics, samples["next_observation"], next_action)
        next_value = tf.reduce_min(next_q, 0) - alpha * next_dist.log_prob(next_action)
        target = tf.stop_gradient(samples["reward"] +
                                  self._gamma * samples["discount"] * next_value)
        q_values = self._q_values(self.critics, samples["observation"], samples["action"])
        critic_loss = tf.reduce_sum(0.5 * tf.square(q_values - target), 0)
        dist, _ = self.actor_net(samples["observation"], step_type=None, network_state=(),
                                 training=True)
        action = self._sample(dist)
        log_prob = dist.log_prob(action)
        actor_loss = (tf.stop_gradient(alpha) * log_prob - tf.reduce_min(
            self._q_values(self.critics, samples["observation"], action), 0))
        alpha_loss = -self.log_alpha * tf.stop_gradient(log_prob + self._target_entropy)
        return dict(loss=critic_loss + actor_loss + alpha_loss, critic_loss=critic_loss,
                    actor_loss=actor_loss, alpha_loss=alpha_loss, entropy=-log_prob,
                    td_error=tf.reduce_mean(tf.abs(q_values - target), 0))

    def after_sgd_step(self) -> None:
        """Moves the target critics (every `target_update_period` steps)."""
        self._target.step()
