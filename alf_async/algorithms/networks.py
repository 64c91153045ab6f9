"""The actor and value networks: tf-agents networks over an MLP or CNN encoder.

Vectors go through fully connected layers; images (`[H, W, C]`
observations) through convolutions first (`conv_layers`), e.g. the Nature
CNN `((32, 8, 4), (64, 4, 2), (64, 3, 1))` then `fc_layers=(512,)` for
Atari. Integer observations (uint8 pixels, MinAtar's 0/1 planes) travel as
they are through every queue and become float only here, scaled by
`observation_scale`, as the networks' first layer.
"""

import functools
from typing import Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from tf_agents.agents.ddpg import critic_network
from tf_agents.agents.sac import tanh_normal_projection_network
from tf_agents.networks import (actor_distribution_network, actor_distribution_rnn_network,
                                network, normal_projection_network, q_network, q_rnn_network,
                                value_network, value_rnn_network)

ConvLayers = Sequence[Tuple[int, int, int]]  # (filters, kernel size, stride) per layer


class ScaledFloat(tf.keras.layers.Layer):
    """Casts observations to float32 and multiplies them by `scale`."""

    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, inputs):  # pylint: disable=arguments-differ
        return tf.cast(inputs, tf.float32) * self.scale

    def get_config(self):  # tf-agents copies preprocessing layers through their config
        return dict(super().get_config(), scale=self.scale)


class SharedTorsoValueNetwork(network.Network):
    """V(s): one linear unit on top of another network's encoder (its weights shared).

    Gradients of the value loss reach the shared encoder too, as in the
    IMPALA and PPO Atari networks.
    """

    def __init__(self, input_tensor_spec, encoder: network.Network, name="SharedTorsoValue"):
        super().__init__(input_tensor_spec, state_spec=(), name=name)
        self._encoder = encoder
        self._head = tf.keras.layers.Dense(
            1, kernel_initializer=tf.keras.initializers.RandomUniform(-0.03, 0.03))

    def call(self, observation, step_type=None, network_state=(), training=False):
        state, network_state = self._encoder(observation, step_type=step_type,
                                             network_state=network_state, training=training)
        return tf.squeeze(self._head(state, training=training), -1), network_state


def encoder_args(observation_spec, conv_layers: ConvLayers, observation_scale: float):
    """The tf-agents encoder arguments shared by both networks."""
    needs_cast = not observation_spec.dtype.is_floating or observation_scale != 1.0
    return dict(conv_layer_params=tuple(tuple(layer) for layer in conv_layers) or None,
                preprocessing_layers=ScaledFloat(observation_scale) if needs_cast else None)


def q_networks(observation_spec, action_spec, fc_layers: Sequence[int],
               activation: str = "relu", conv_layers: ConvLayers = (),
               observation_scale: float = 1.0, lstm_size: Optional[Sequence[int]] = None):
    """A tf-agents `QNetwork` (one output per action) and a copy of it, variables created.

    Arguments as for `actor_and_value_networks`; with `lstm_size` a
    `QRnnNetwork`: `fc_layers`, then the LSTM, then the linear Q head. Returns
    `(q_net, copy)`; the copy's weights are its own (a target network starts
    from them).
    """
    act_fn = tf.keras.activations.get(activation)
    encoder = encoder_args(observation_spec, conv_layers, observation_scale)
    if lstm_size:
        q_net = q_rnn_network.QRnnNetwork(
            observation_spec, action_spec, input_fc_layer_params=tuple(fc_layers),
            lstm_size=tuple(lstm_size), output_fc_layer_params=(), activation_fn=act_fn,
            **encoder)
    else:
        q_net = q_network.QNetwork(observation_spec, action_spec,
                                   fc_layer_params=tuple(fc_layers), activation_fn=act_fn,
                                   **encoder)
    copy = q_net.copy(name="TargetQNetwork")
    q_net.create_variables()
    copy.create_variables()
    return q_net, copy


def squashed_actor_and_critics(observation_spec, action_spec,
                               actor_fc_layers: Sequence[int],
                               critic_fc_layers: Sequence[int],
                               activation: str = "relu", num_critics: int = 2):
    """SAC's networks: a tanh-squashed Gaussian policy and Q(s, a) critics with targets.

    Returns:
        `(actor_net, critics, target_critics)`, variables created; the
        targets are copies with their own weights.
    """
    act_fn = tf.keras.activations.get(activation)
    actor_net = actor_distribution_network.ActorDistributionNetwork(
        observation_spec, action_spec, fc_layer_params=tuple(actor_fc_layers),
        activation_fn=act_fn,
        continuous_projection_net=tanh_normal_projection_network.TanhNormalProjectionNetwork)
    actor_net.create_variables()
    critics, targets = [], []
    for i in range(num_critics):
        critic = critic_network.CriticNetwork(
            (observation_spec, action_spec), joint_fc_layer_params=tuple(critic_fc_layers),
            activation_fn=act_fn, kernel_initializer="glorot_uniform",
            last_kernel_initializer="glorot_uniform", name=f"Critic{i}")
        target = critic.copy(name=f"TargetCritic{i}")
        critic.create_variables()
        target.create_variables()
        critics.append(critic)
        targets.append(target)
    return actor_net, critics, targets


def gaussian_projection(initial_action_std: float):
    """tf-agents' Gaussian head (state-independent std) starting at this std.

    The std is `softplus(b)` of a learned bias `b`, initialised so that it
    starts at `initial_action_std` in every action dimension; means are
    squashed into the action bounds. Returns a `continuous_projection_net`
    callable for tf-agents' actor distribution networks.
    """
    if initial_action_std <= 0:
        raise ValueError(f"initial_action_std must be > 0, got {initial_action_std}")
    return functools.partial(
        normal_projection_network.NormalProjectionNetwork, init_means_output_factor=0.1,
        std_bias_initializer_value=float(np.log(np.expm1(initial_action_std))))


def policy_action(actor_net, observation, step_type, greedy: bool, seed=None):
    """`(action, log_prob)` of a feed-forward actor distribution network for `[N, ...]`
    observations: its mode (`greedy`) or a sample (`seed`: a stateless one's)."""
    dist, _ = actor_net(observation, step_type=step_type, network_state=(), training=False)
    action = dist.mode() if greedy else dist.sample(seed=seed)
    return action, dist.log_prob(action)


def actor_network(observation_spec, action_spec, fc_layers: Sequence[int],
                  activation: str = "tanh", conv_layers: ConvLayers = (),
                  observation_scale: float = 1.0, initial_action_std: float = 0.35):
    """A feed-forward tf-agents `ActorDistributionNetwork`: categorical for discrete
    actions, a Gaussian (`gaussian_projection`) for `Box` ones. Arguments as for
    `actor_and_value_networks`; its variables are made on first call."""
    return actor_distribution_network.ActorDistributionNetwork(
        observation_spec, action_spec, fc_layer_params=tuple(fc_layers),
        activation_fn=tf.keras.activations.get(activation),
        continuous_projection_net=gaussian_projection(initial_action_std),
        **encoder_args(observation_spec, conv_layers, observation_scale))


def actor_and_value_networks(observation_spec, action_spec,
                             actor_fc_layers: Sequence[int],
                             value_fc_layers: Sequence[int],
                             activation: str = "tanh",
                             conv_layers: ConvLayers = (),
                             observation_scale: float = 1.0,
                             lstm_size: Optional[Sequence[int]] = None,
                             shared_torso: bool = False,
                             initial_action_std: float = 0.35):
    """Builds an actor distribution network and a value network.

    Args:
        observation_spec, action_spec: unbatched tf-agents tensor specs.
        actor_fc_layers, value_fc_layers: hidden layer sizes after the
            convolutions (if any).
        activation: name of a Keras activation for every hidden layer.
        conv_layers: `(filters, kernel, stride)` per convolution, applied to
            `[N, H, W, C]` observations before the fully connected layers.
        observation_scale: observations are cast to float32 and multiplied by
            this (1/255 for uint8 pixels).
        lstm_size: LSTM layer sizes after the hidden layers (None:
            feed-forward networks).
        shared_torso: the value network is one linear unit on the actor's
            encoder (convolutions and `actor_fc_layers`; `value_fc_layers`
            unused), which halves the encoders' cost. Feed-forward only.
        initial_action_std: the Gaussian policy's std before training, for
            `Box` actions (0.35 is tf-agents' default).

    Returns:
        `(actor_net, value_net)`, variables created; with `shared_torso` some
        of their variables are the same objects.

    Raises:
        ValueError: `shared_torso` with `lstm_size`.
    """
    if shared_torso and lstm_size:
        raise ValueError("shared_torso=True needs feed-forward networks (lstm_size=None)")
    act_fn = tf.keras.activations.get(activation)
    projection = gaussian_projection(initial_action_std)
    encoder = lambda: encoder_args(observation_spec, conv_layers, observation_scale)
    if lstm_size:
        actor_net = actor_distribution_rnn_network.ActorDistributionRnnNetwork(
            observation_spec, action_spec, input_fc_layer_params=tuple(actor_fc_layers),
            lstm_size=tuple(lstm_size), output_fc_layer_params=(), activation_fn=act_fn,
            continuous_projection_net=projection, **encoder())
        value_net = value_rnn_network.ValueRnnNetwork(
            observation_spec, input_fc_layer_params=tuple(value_fc_layers),
            lstm_size=tuple(lstm_size), output_fc_layer_params=(), activation_fn=act_fn,
            **encoder())
    else:
        actor_net = actor_network(observation_spec, action_spec, actor_fc_layers, activation,
                                  conv_layers, observation_scale, initial_action_std)
        if shared_torso:  # tf-agents keeps the actor's encoder in `_encoder`
            value_net = SharedTorsoValueNetwork(observation_spec, actor_net._encoder)  # pylint: disable=protected-access
        else:
            value_net = value_network.ValueNetwork(
                observation_spec, fc_layer_params=tuple(value_fc_layers), activation_fn=act_fn,
                **encoder())
    actor_net.create_variables()
    value_net.create_variables()
    return actor_net, value_net
