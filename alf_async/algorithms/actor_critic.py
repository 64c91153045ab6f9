"""What PPO and V-trace actor-critic share: networks, acting, loss terms."""

from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.algorithms import layout

from alf_async.algorithms import networks
from alf_async.algorithms import advantages as adv_lib
from alf_async.algorithms.normalization import Normalization
from alf_async.algorithms.schedules import Schedule, ScheduledValue

Samples = Dict[str, tf.Tensor]


class ActorCriticAlgorithm(tf.Module):
    """An actor network (a distribution over actions) and a value network.

    Plumbing for actor-critic algorithms: networks, acting, normalisation, the
    time-major layout (`_sequences`), the sample dict (`_samples`), evaluating
    the networks on samples (`_evaluate`) and adding the loss terms (`_total`).
    A subclass writes only its ALGO LOGIC, `preprocess` and `loss` (see
    `a2c.py`, the shortest).

    Subclasses turn a learn batch into samples (`preprocess`) and samples into
    per-sample loss terms (`loss`); the `Learner` does the rest. A sample is
    one step (`[N]` leaves) for feed-forward networks, and one unroll
    (`[N, T]` leaves, N = Q * B sequences) for recurrent ones, which then
    start from the LSTM states stored with the unroll's first step.

    The policy state is `(actor_state, value_state)`: both networks carry
    their LSTM state while acting (both `()` when feed-forward).

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
                 lstm_size: Optional[Sequence[int]] = None,
                 conv_layers: networks.ConvLayers = (),
                 observation_scale: float = 1.0,
                 reward_clip: Optional[float] = None,
                 shared_torso: bool = False,
                 initial_action_std: float = 0.35,
                 normalize_advantages: bool = True,
                 normalize_observations: bool = False,
                 normalize_rewards: bool = False,
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
            lstm_size: LSTM layer sizes after the hidden layers (None:
                feed-forward networks).
            conv_layers: `(filters, kernel, stride)` per convolution before
                the hidden layers, for `[H, W, C]` image observations.
            observation_scale: observations are cast to float32 and multiplied
                by this inside the networks (1/255 for uint8 pixels).
            reward_clip: clip rewards to `[-reward_clip, reward_clip]` for
                learning (None: as they are); returns are reported unclipped.
            shared_torso: the value network is a linear head on the policy
                network's encoder (feed-forward networks only).
            initial_action_std: std of the Gaussian policy before training
                (`Box` actions; 0.35 is tf-agents' default).
            normalize_advantages: normalise the policy-gradient advantages to
                mean 0 and std 1 over each learn batch (all replicas).
            normalize_observations: normalise observations by their running
                mean and std (`Normalization`), for acting and learning.
            normalize_rewards: divide rewards by the running std of the
                discounted return, for learning.
        """
        super().__init__(name=name)
        self.time_step_spec = tensor_spec.from_spec(time_step_spec)
        self.action_spec = tensor_spec.from_spec(action_spec)
        self.recurrent = bool(lstm_size)
        self.burn_in = 0  # recurrent: whole unrolls from their stored state
        self.item_terms = ()  # learns from fresh unrolls: nothing to prioritize
        obs_spec = self.time_step_spec.observation
        if normalize_observations and not obs_spec.dtype.is_floating:
            raise ValueError(f"{type(self).__name__}.normalize_observations=True needs float "
                             f"observations, not {obs_spec.dtype.name} (scale pixels with "
                             f"observation_scale)")
        self.actor_net, self.value_net = networks.actor_and_value_networks(
            obs_spec, self.action_spec, actor_fc_layers, value_fc_layers, activation,
            conv_layers, observation_scale, lstm_size, shared_torso, initial_action_std)
        self.normalization = Normalization(obs_spec, discount, normalize_observations,
                                           normalize_rewards)
        self._normalize_advantages = normalize_advantages
        self._reward_clip = reward_clip
        self._value_loss_coeff = value_loss_coeff
        self._mutable = {}
        self.entropy_coeff = self._add_mutable(ScheduledValue("entropy_coeff", entropy_coeff))
        self._gamma = self._add_mutable(ScheduledValue("discount", discount))

    def _add_mutable(self, setting: ScheduledValue) -> tf.Variable:
        """Registers a setting the run may change without a rebuild; returns its variable."""
        self._mutable[setting.name] = setting
        return setting.variable

    @property
    def mutable_settings(self) -> Dict[str, ScheduledValue]:
        """name -> `ScheduledValue` of the settings a built run may change (the
        entropy coefficient, the discount, and a subclass's: PPO's clip ratio).
        The reward normalisation's discount stays the configured one."""
        return dict(self._mutable)

    @property
    def policy_state_spec(self):
        """`(actor_state_spec, value_state_spec)`, unbatched."""
        return (self.actor_net.state_spec, self.value_net.state_spec)

    def scalars(self):
        return {"entropy_coeff": self.entropy_coeff}

    def set_env_steps(self, env_steps: int) -> None:
        """Moves the mutable settings' schedules (entropy coefficient, ...) to `env_steps`."""
        for setting in self._mutable.values():
            setting.follow(env_steps)

    def observe(self, batch) -> None:
        """Updates the running statistics (`Normalization`) from a `LearnBatch`.

        Call once per learn batch, in the order they arrive (the learner's
        `place()` does).
        """
        step_type = batch.experience.time_step.step_type  # [Q', T, B]
        self.normalization.observe(batch.experience.time_step, batch.env_ids,
                                   batch.env_steps // (step_type.shape[1] * step_type.shape[2]))

    @property
    def variables_to_train(self):
        """Both networks' trainable variables, each once (a shared torso is in both)."""
        return [v for _, group in self.loss_groups for v in group]

    @property
    def loss_groups(self):
        """Policy and value network apart (the learner may clip them apart); one
        group with a shared torso."""
        actor, value = self.actor_net.trainable_variables, self.value_net.trainable_variables
        actor_refs = {v.ref() for v in actor}
        if any(v.ref() in actor_refs for v in value):
            unique = {v.ref(): v for v in actor + value}
            return [("loss", list(unique.values()))]
        return [("loss", actor), ("loss", value)]

    def after_sgd_step(self) -> None:
        """Nothing to do after an optimizer step (no target networks)."""

    def act(self, observation, step_type, policy_state, greedy: bool = False, seed=None,
            env_id=None):
        """Acts on a batch of N observations (leaves `[N, ...]`).

        Args:
            seed: `[2]` integer seed for a stateless (reproducible) sample;
                None samples from TensorFlow's stateful generator.

        Returns:
            `(action, new_policy_state, log_prob)`, leading dim N.
        """
        actor_state, value_state = policy_state
        observation = self.normalization.observation(observation)
        dist, actor_state = self.actor_net(observation, step_type=step_type,
                                           network_state=actor_state, training=False)
        if self.recurrent:  # the value network's memory follows the episode too
            _, value_state = self.value_net(observation, step_type=step_type,
                                            network_state=value_state, training=False)
        action = dist.mode() if greedy else dist.sample(seed=seed)
        return action, (actor_state, value_state), dist.log_prob(action)

    def _over_time(self, net, steps, state, read: Callable, training: bool = False):
        """Applies `net` to time-major `[T, N]` steps.

        A recurrent `net` runs over each of the N sequences from `state`.
        `read(output, to_output_layout)` picks a tensor from the network's
        output (`to_output_layout` maps time-major tensors such as actions to
        the output's layout); the result comes back time-major.
        """
        if not self.recurrent:
            output, _ = net(steps.observation, step_type=steps.step_type, network_state=(),
                            training=training)
            return read(output, lambda x: x)
        output, _ = net(tf.nest.map_structure(layout.swap_time, steps.observation),
                        step_type=layout.swap_time(steps.step_type), network_state=state,
                        training=training)
        return layout.swap_time(read(output, layout.swap_time))

    def _initial_states(self, experience):
        """`(actor_state, value_state)` before each unroll, leaves `[Q * B, ...]`."""
        if not self.recurrent:
            return (), ()
        return tf.nest.map_structure(layout.first_step, experience.policy_state)

    def _sequences(self, experience, bootstrap):
        """Time-major steps `[T + 1, N]` (bootstrap last), their values and mask.

        `mask` (`[T, N]`) is 0 at LAST steps, whose transition crosses an
        episode boundary.
        """
        steps = tf.nest.map_structure(layout.time_major_with_bootstrap,
                                      experience.time_step, bootstrap)
        reward = self.normalization.reward(steps.reward)
        if self._reward_clip is not None:
            reward = tf.clip_by_value(reward, -self._reward_clip, self._reward_clip)
        steps = steps._replace(observation=self.normalization.observation(steps.observation),
                               reward=reward)
        values = self._over_time(self.value_net, steps, self._initial_states(experience)[1],
                                 lambda values, _: values)
        return steps, values, adv_lib.transition_mask(steps.step_type)

    def _samples(self, experience, steps, mask, advantage, value_target) -> Samples:
        """Training samples: step inputs, actions, behaviour log-probs, targets.

        `advantage` and `value_target` are time-major `[T, N]`; the advantages
        are normalised here if the algorithm was built to.

        Feed-forward: `[T * N]` single steps. Recurrent: `[N, T]` sequences,
        plus the `actor_state` and `value_state` (`[N, ...]`) they start from.
        """
        if self._normalize_advantages:
            advantage = adv_lib.normalize(advantage, mask)
        rows = layout.swap_time if self.recurrent else layout.flatten_time  # from [T, N]
        unroll_rows = lambda x: rows(x[:-1])
        sample_rows = lambda x: rows(layout.time_major(x))
        samples = dict(
            observation=tf.nest.map_structure(unroll_rows, steps.observation),
            step_type=unroll_rows(steps.step_type),
            action=tf.nest.map_structure(sample_rows, experience.action),
            behaviour_log_prob=sample_rows(experience.log_prob),
            mask=rows(mask), advantage=rows(advantage), value_target=rows(value_target))
        if self.recurrent:
            samples["actor_state"], samples["value_state"] = self._initial_states(experience)
        return samples

    def _evaluate(self, samples: Samples):
        """The current policy's distribution and value on a minibatch of samples."""
        dist, _ = self.actor_net(samples["observation"], step_type=samples["step_type"],
                                 network_state=samples.get("actor_state", ()), training=True)
        values, _ = self.value_net(samples["observation"], step_type=samples["step_type"],
                                   network_state=samples.get("value_state", ()),
                                   training=True)
        return dist, values

    def _total(self, pg_loss, values, value_target, entropy) -> Dict[str, tf.Tensor]:
        value_loss = 0.5 * tf.square(values - value_target)
        return dict(
            loss=pg_loss + self._value_loss_coeff * value_loss - self.entropy_coeff * entropy,
            pg_loss=pg_loss, value_loss=value_loss, entropy=entropy)
