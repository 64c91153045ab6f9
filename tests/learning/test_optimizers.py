import numpy as np
import pytest
import tensorflow as tf

from alf_async.learning.optimizers import FusedAdam, make_optimizer


def _variables(seed):
    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (3, 4), (4,), (4,), ()]  # alike shapes: each must keep its own slots
    return [tf.Variable(rng.normal(size=shape).astype(np.float32)) for shape in shapes]


def _train(optimizer, variables, steps=20):
    """`steps` updates on a quadratic loss whose gradients change every step."""
    targets = [tf.constant(np.random.default_rng(7).normal(size=v.shape).astype(np.float32))
               for v in variables]

    @tf.function
    def step(scale):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(scale * (v - t) ** 2)
                             for v, t in zip(variables, targets)])
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    for i in range(steps):
        step(tf.constant(1.0 + i % 3, tf.float32))
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("strategy", ["default", "mirrored"])
def test_fused_adam_steps_exactly_as_keras_adam(strategy):
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if strategy == "mirrored"
                else tf.distribute.get_strategy())
    results = []
    for make in (FusedAdam, tf.keras.optimizers.Adam):
        with strategy.scope():
            variables = _variables(seed=1)
            optimizer = make(learning_rate=0.05, epsilon=1e-3)
            optimizer.build(variables)
        results.append(_train(optimizer, variables))
        assert int(optimizer.iterations.numpy()) == 20
    initial = [v.numpy() for v in _variables(seed=1)]
    for fused, keras, start in zip(*results, initial):
        np.testing.assert_allclose(fused, keras, rtol=1e-4, atol=2e-5)  # float32 order
        assert np.abs(fused - start).min() > 0.01  # every entry moved


def test_fused_adam_traces_fewer_ops_per_update():
    def ops_in_update(make):
        variables = _variables(seed=2)
        optimizer = make(learning_rate=0.01)
        optimizer.build(variables)
        update = tf.function(lambda grads: optimizer.apply_gradients(zip(grads, variables)))
        graph = update.get_concrete_function([tf.TensorSpec(v.shape) for v in variables]).graph
        return len(graph.get_operations())

    assert ops_in_update(FusedAdam) < 0.7 * ops_in_update(tf.keras.optimizers.Adam)


@pytest.mark.parametrize("name", ["adam", "amsgrad"])
def test_after_a_quiet_stretch_only_amsgrad_keeps_a_sudden_gradients_step_small(name):
    lr = 1e-3
    optimizer = make_optimizer(name, lr, epsilon=1e-8, decay=0.9, momentum=0.0)
    var = tf.Variable(0.0)

    @tf.function
    def steps(gradient, n):
        for _ in tf.range(n):
            optimizer.apply_gradients([(gradient, var)])

    steps(tf.constant(1.0), 200)  # learning: steps of ~lr
    steps(tf.constant(1e-4), 10_000)  # solved: tiny gradients, Adam's second moment decays
    before = var.numpy()
    steps(tf.constant(1.0), 1)  # one failure
    step = abs(var.numpy() - before)
    if name == "adam":
        assert step > 2 * lr  # sqrt(v) has forgotten the gradients of 1
    else:
        assert step < 0.5 * lr  # divided by the largest sqrt(v) so far: below a learning step
