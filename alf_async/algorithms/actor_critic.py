"""What PPO and V-trace actor-critic share: networks, acting, loss terms."""

from typing import Dict, Sequence

import tensorflow as tf
from tf_agents.networks import actor_distribution_network, value_network
from tf_agents.specs import tensor_spec

from alf_async.algorithms import advantages as adv_lib
from alf_async.schedules import Schedule, schedule_value

Samples = Dict[str, tf.Tensor]


class ActorCriticAlgorithm(tf.Module):
    """An actor network (a distribution over actions) and a value network.

    Subclasses turn a learn batch into `[N]` samples (`preprocess`) and
    samples into per-sample loss terms (`loss`); the `Learner` does the rest.

    Thread-safety: actor threads call `act` while the learner trains; both
    only read the networks' variables and only the learner's optimizer writes
    them. Stale reads are what the off-policy corrections are for.
    """

    def __init__(self, time_step_spec, action_spec,
                 actor_fc_layers: Sequence[int] = (64, 64),
                 value_fc_layers: Sequence[int] = (64, 64),
                 activation: str = "tanh",
                 discount: float = 0.99,
                 value_loss_coeff: float = 0.5,
                 entropy_coeff: Schedule = 0.0,
                 name: str = "actor_critic"):
        """
        Args:
            time_step_spec, action_spec: unbatched tf-agents specs of one sub-env.
            actor_fc_layers, value_fc_layers: hidden layer sizes.
            activation: name of a Keras activation for the hidden layers.
            discount: gamma.
            value_loss_coeff: weight of the value loss.
            entropy_coeff: weight of the entropy bonus: a constant or
                piecewise-linear points `[(env_steps, value), ...]`.
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
        self._value_loss_coeff = value_loss_coeff
        self._entropy_schedule = entropy_coeff
        self.entropy_coeff = tf.Variable(schedule_value(entropy_coeff, 0), trainable=False,
                                         name="entropy_coeff")

    @property
    def policy_state_spec(self):
        return self.actor_net.state_spec

    def set_env_steps(self, env_steps: int) -> None:
        """Moves the schedules (entropy coefficient) to `env_steps`."""
        self.entropy_coeff.assign(schedule_value(self._entropy_schedule, env_steps))

    @property
    def variables_to_train(self):
        return self.actor_net.trainable_variables + self.value_net.trainable_variables

    def act(self, observation, step_type, policy_state, greedy: bool = False, seed=None):
        """Acts on a batch of N observations (leaves `[N, ...]`).

        Args:
            seed: `[2]` integer seed for a stateless (reproducible) sample;
                None samples from TensorFlow's stateful generator.

        Returns:
            `(action, new_policy_state, log_prob)`, leading dim N.
        """
        dist, state = self.actor_net(observation, step_type=step_type,
                                     network_state=policy_state, training=False)
        action = dist.mode() if greedy else dist.sample(seed=seed)
        return action, state, dist.log_prob(action)

    def _sequences(self, experience, bootstrap):
        """Time-major steps `[T + 1, N]` (bootstrap last), their values and mask.

        `mask` (`[T, N]`) is 0 at LAST steps, whose transition crosses an
        episode boundary.
        """
        steps = tf.nest.map_structure(adv_lib.time_major_with_bootstrap,
                                      experience.time_step, bootstrap)
        values, _ = self.value_net(steps.observation, step_type=steps.step_type,
                                   training=False)
        return steps, values, adv_lib.transition_mask(steps.step_type)

    @staticmethod
    def _samples(experience, steps, mask, **targets) -> Samples:
        """`[N]` training samples: step inputs, actions, behaviour log-probs, targets."""
        unroll_rows = lambda x: adv_lib.flatten_time(x[:-1])
        sample_rows = lambda x: adv_lib.flatten_time(adv_lib.time_major(x))
        return dict(
            observation=tf.nest.map_structure(unroll_rows, steps.observation),
            step_type=unroll_rows(steps.step_type),
            action=tf.nest.map_structure(sample_rows, experience.action),
            behaviour_log_prob=sample_rows(experience.log_prob),
            mask=adv_lib.flatten_time(mask),
            **{k: adv_lib.flatten_time(v) for k, v in targets.items()})

    def _evaluate(self, samples: Samples):
        """The current policy's distribution and value on `[N]` samples."""
        dist, _ = self.actor_net(samples["observation"], step_type=samples["step_type"],
                                 network_state=(), training=True)
        values, _ = self.value_net(samples["observation"], step_type=samples["step_type"],
                                   training=True)
        return dist, values

    def _total(self, pg_loss, values, value_target, entropy) -> Dict[str, tf.Tensor]:
        value_loss = 0.5 * tf.square(values - value_target)
        return dict(
            loss=pg_loss + self._value_loss_coeff * value_loss - self.entropy_coeff * entropy,
            pg_loss=pg_loss, value_loss=value_loss, entropy=entropy)
