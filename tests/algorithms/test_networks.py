import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec

from alf_async.algorithms import networks

IMAGE = tensor_spec.TensorSpec((10, 10, 4), tf.uint8)
ACTIONS = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 2)


def _conv_kernels(net):
    return [v for v in net.trainable_variables if len(v.shape) == 4]


def test_scaled_float_casts_and_scales_and_survives_tf_agents_copying():
    layer = networks.ScaledFloat(1 / 255)
    copy = type(layer).from_config(layer.get_config())
    x = np.array([[0, 51, 255]], np.uint8)
    for scaled in (layer(x), copy(x)):
        assert scaled.dtype == tf.float32
        np.testing.assert_allclose(scaled.numpy(), [[0.0, 0.2, 1.0]], rtol=1e-6)


@pytest.mark.parametrize("lstm_size", [None, (8,)])
def test_conv_networks_take_uint8_images(lstm_size):
    actor, value = networks.actor_and_value_networks(
        IMAGE, ACTIONS, (32,), (32,), "relu", conv_layers=((16, 3, 1), (8, 3, 2)),
        observation_scale=1.0, lstm_size=lstm_size)
    for net in (actor, value):
        assert [tuple(k.shape) for k in _conv_kernels(net)] == [(3, 3, 4, 16), (3, 3, 16, 8)]
    images = np.random.default_rng(0).integers(0, 2, (5, 10, 10, 4)).astype(np.uint8)
    state = tf.nest.map_structure(lambda s: tf.zeros([5, *s.shape]), actor.state_spec)
    dist, _ = actor(images, step_type=tf.ones([5], tf.int32), network_state=state)
    assert dist.sample().shape == (5,)
    state = tf.nest.map_structure(lambda s: tf.zeros([5, *s.shape]), value.state_spec)
    values, _ = value(images, step_type=tf.ones([5], tf.int32), network_state=state)
    assert values.shape == (5,)


def test_observation_scale_is_applied_before_the_first_layer():
    build = lambda scale: networks.actor_and_value_networks(
        IMAGE, ACTIONS, (8,), (8,), "relu", conv_layers=((4, 3, 1),), observation_scale=scale)[1]
    half, one = build(0.5), build(1.0)
    one.set_weights(half.get_weights())
    images = np.random.default_rng(1).integers(0, 3, (4, 10, 10, 4)).astype(np.uint8)
    np.testing.assert_allclose(half(2 * images)[0].numpy(), one(images)[0].numpy(),
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(half(images)[0].numpy(), one(images)[0].numpy())


def test_float_vectors_keep_the_plain_mlp():
    vector = tensor_spec.TensorSpec((4,), tf.float32)
    actor, value = networks.actor_and_value_networks(vector, ACTIONS, (64, 64), (64, 64))
    assert not _conv_kernels(actor) and not _conv_kernels(value)
    kernels = [tuple(v.shape) for v in value.trainable_variables if len(v.shape) == 2]
    assert kernels == [(4, 64), (64, 64), (64, 1)]


def test_shared_torso_value_head_sits_on_the_actors_encoder():
    actor, value = networks.actor_and_value_networks(
        IMAGE, ACTIONS, (32,), (999,), "relu", conv_layers=((8, 3, 1),), shared_torso=True)
    actor_refs = {v.ref() for v in actor.trainable_variables}
    own = [v for v in value.trainable_variables if v.ref() not in actor_refs]
    assert [tuple(v.shape) for v in own] == [(32, 1), (1,)]  # only the linear head is its own
    images = np.random.default_rng(2).integers(0, 2, (3, 10, 10, 4)).astype(np.uint8)
    before = value(images)[0].numpy()
    kernel = next(v for v in actor.trainable_variables if len(v.shape) == 4)
    kernel.assign(kernel * 2.0)  # moving the actor's convolution moves the value
    assert not np.allclose(value(images)[0].numpy(), before)


def test_shared_torso_needs_feed_forward_networks():
    with pytest.raises(ValueError, match="shared_torso=True needs feed-forward"):
        networks.actor_and_value_networks(IMAGE, ACTIONS, (8,), (8,), shared_torso=True,
                                          lstm_size=(8,))


@pytest.mark.parametrize("lstm_size", [None, (8,)])
@pytest.mark.parametrize("std", [0.35, 1.0])
def test_gaussian_policy_starts_at_the_initial_action_std(lstm_size, std):
    obs = tensor_spec.TensorSpec((3,), tf.float32)
    box = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
    actor, _ = networks.actor_and_value_networks(obs, box, (16,), (16,), lstm_size=lstm_size,
                                                 initial_action_std=std)
    state = tf.nest.map_structure(lambda s: tf.zeros([4, *s.shape]), actor.state_spec)
    observations = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    dist, _ = actor(observations, step_type=tf.ones([4], tf.int32), network_state=state)
    np.testing.assert_allclose(dist.stddev().numpy(), np.full((4, 2), std), rtol=1e-5)


def test_initial_action_std_must_be_positive():
    with pytest.raises(ValueError, match="initial_action_std"):
        networks.gaussian_projection(0.0)
