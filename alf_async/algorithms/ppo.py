"""PPO with a clipped surrogate against the behaviour policy's log-probs."""

from typing import Dict, Sequence

import gin
import tensorflow as tf
from tf_agents.networks import actor_distribution_network, value_network
from tf_agents.specs import tensor_spec

from alf_async.algorithms import advantages as adv_lib

Samples = Dict[str, tf.Tensor]


@gin.configurable(module="alf_async")
class PPOAlgorithm(tf.Module):
    """Clipped-ratio PPO with a separate value network and GAE(lambda).

    Thread-safety: actor threads call `act` while the learner trains; both
    only read the networks' variables and only the learner's optimizer writes
    them. A stale read is what the ratio clipping corrects for.
    """

    def __init__(self, time_step_spec, action_spec,
                 actor_fc_layers: Sequence[int] = (64, 64),
                 value_fc_layers: Sequence[int] = (64, 64),
                 activation: str = "tanh",
                 discount: float = 0.99,
                 gae_lambda: float = 0.95,
                 clip_ratio: float = 0.2,
                 value_loss_coeff: float = 0.5,
                 entropy_coeff: float = 0.0,
                 normalize_advantages: bool = True,
                 name: str = "ppo"):
        """
        Args:
            time_step_spec, action_spec: unbatched tf-agents specs of one sub-env.
            actor_fc_layers, value_fc_layers: hidden layer sizes.
            activation: name of a Keras activation for the hidden layers.
            discount: gamma.
            gae_lambda: GAE's lambda.
            clip_ratio: epsilon of the clipped surrogate objective.
            value_loss_coeff: weight of the value loss.
            entropy_coeff: weight of the entropy bonus.
            normalize_advantages: normalise advantages over each learn batch.
        """
        super().__init__(name=name)
        self.time_step_spec = tensor_spec.from_spec(time_step_spec)
        self.action_spec = tensor_spec.from_spec(action_spec)
        obs_spec = self.time_step_spec.observation
        act_fn = tf.keras.activations.get(activation)
        self.actor_net = actor_distribution_network.ActorDistributionNetwork(
            obs_spec, self.action_spec, fc_layer_params=tuple(actor_fc_layers),
            activation_fn=act_fn)
        self.value_net = value_network.ValueNetwork(
            obs_spec, fc_layer_params=tuple(value_fc_layers), activation_fn=act_fn)
        self.actor_net.create_variables()
        self.value_net.create_variables()
        self._gamma = discount
        self._lambda = gae_lambda
        self._clip_ratio = clip_ratio
        self._value_loss_coeff = value_loss_coeff
        self._entropy_coeff = entropy_coeff
        self._normalize_advantages = normalize_advantages

    @property
    def policy_state_spec(self):
        return self.actor_net.state_spec

    @property
    def variables_to_train(self):
        return self.actor_net.trainable_variables + self.value_net.trainable_variables

    def act(self, time_step, policy_state, greedy: bool = False):
        """Acts on a batch of `[N, ...]` time steps.

        Returns:
            `(action, new_policy_state, log_prob)`, leading dim N.
        """
        dist, state = self.actor_net(time_step.observation, step_type=time_step.step_type,
                                     network_state=policy_state, training=False)
        action = dist.mode() if greedy else dist.sample()
        return action, state, dist.log_prob(action)

    def preprocess(self, experience, bootstrap) -> Samples:
        """Turns (a replica's share of) a learn batch into training samples.

        Advantages come from the current value network, once per learn batch.
        Must run in a replica context: normalisation statistics are
        all-reduced over replicas.

        Args:
            experience: `Experience`, leaves `[Q, T, B, ...]`.
            bootstrap: time step after each unroll, leaves `[Q, B, ...]`.

        Returns:
            Dict of `[T * Q * B, ...]` tensors; `mask` is 0 at LAST steps,
            whose transition crosses an episode boundary.
        """
        steps = tf.nest.map_structure(adv_lib.time_major_with_bootstrap,
                                      experience.time_step, bootstrap)
        values, _ = self.value_net(steps.observation, step_type=steps.step_type,
                                   training=False)
        advantage = adv_lib.generalized_advantage_estimation(
            steps.reward, steps.discount, steps.step_type, values, self._gamma,
            self._lambda)
        mask = adv_lib.transition_mask(steps.step_type)
        value_target = advantage + values[:-1]
        if self._normalize_advantages:
            advantage = normalize(advantage, mask)
        unroll_rows = lambda x: adv_lib.flatten_time(x[:-1])
        sample_rows = lambda x: adv_lib.flatten_time(adv_lib.time_major(x))
        return dict(
            observation=tf.nest.map_structure(unroll_rows, steps.observation),
            step_type=unroll_rows(steps.step_type),
            action=tf.nest.map_structure(sample_rows, experience.action),
            behaviour_log_prob=sample_rows(experience.log_prob),
            advantage=adv_lib.flatten_time(advantage),
            value_target=adv_lib.flatten_time(value_target),
            mask=adv_lib.flatten_time(mask))

    def loss(self, samples: Samples) -> Dict[str, tf.Tensor]:
        """Per-sample loss terms of a `[N]` minibatch; `loss` is minimised."""
        dist, _ = self.actor_net(samples["observation"], step_type=samples["step_type"],
                                 network_state=(), training=True)
        values, _ = self.value_net(samples["observation"], step_type=samples["step_type"],
                                   training=True)
        log_ratio = dist.log_prob(samples["action"]) - samples["behaviour_log_prob"]
        ratio = tf.exp(log_ratio)
        advantage = samples["advantage"]
        clipped = tf.clip_by_value(ratio, 1 - self._clip_ratio, 1 + self._clip_ratio)
        pg_loss = -tf.minimum(ratio * advantage, clipped * advantage)
        value_loss = 0.5 * tf.square(values - samples["value_target"])
        entropy = dist.entropy()
        return dict(
            loss=pg_loss + self._value_loss_coeff * value_loss - self._entropy_coeff * entropy,
            pg_loss=pg_loss,
            value_loss=value_loss,
            entropy=entropy,
            approx_kl=ratio - 1 - log_ratio,
            clip_fraction=tf.cast(tf.abs(ratio - 1) > self._clip_ratio, tf.float32))


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
