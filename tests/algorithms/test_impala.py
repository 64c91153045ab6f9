import numpy as np
import pytest
import tensorflow as tf

from alf_async.algorithms import ImpalaAlgorithm
from fakes import actor_critic_samples, cartpole_actor_critic


def _algorithm(**kwargs):
    return cartpole_actor_critic(ImpalaAlgorithm, **kwargs)


def _samples(rng, n=64):
    return actor_critic_samples(rng, n, behaviour_probs=(0.1, 0.9))


def _log_probs(algo, samples):
    dist, _ = algo.actor_net(samples["observation"], step_type=samples["step_type"],
                             network_state=())
    return dist.log_prob(samples["action"])


@pytest.mark.parametrize("pg_rho_bar", [None, 1.0])
def test_recomputed_policy_gradient_is_weighted_by_the_current_policy_rho(pg_rho_bar):
    rng = np.random.default_rng(3)
    algo = _algorithm(clip_pg_rho_threshold=pg_rho_bar, entropy_coeff=0.0,
                      recompute_pg_rho=True)
    s = _samples(rng)
    with tf.GradientTape() as tape:
        pg_loss = tf.reduce_sum(algo.loss(s)["pg_loss"])
    grads = tape.gradient(pg_loss, algo.actor_net.trainable_variables)
    log_p = _log_probs(algo, s).numpy()
    rho = np.exp(log_p - s["behaviour_log_prob"])
    assert (rho > 1.5).any() and (rho < 0.7).any(), "the test must exercise the weights"
    weight = rho if pg_rho_bar is None else np.minimum(pg_rho_bar, rho)
    np.testing.assert_allclose(pg_loss.numpy(), -(weight * s["advantage"] * log_p).sum(),
                               rtol=1e-4)
    # The weight is a coefficient: the gradient is weight * A * grad log pi, no more.
    with tf.GradientTape() as tape:
        want_loss = -tf.reduce_sum(weight * s["advantage"] * _log_probs(algo, s))
    want = tape.gradient(want_loss, algo.actor_net.trainable_variables)
    for got_g, want_g in zip(grads, want):
        np.testing.assert_allclose(got_g.numpy(), want_g.numpy(), rtol=1e-4, atol=1e-6)


def test_without_recompute_the_batch_weighted_advantage_is_used_as_it_is():
    rng = np.random.default_rng(5)
    algo = _algorithm(clip_pg_rho_threshold=1.0, entropy_coeff=0.0)
    s = _samples(rng)
    want = -s["advantage"] * _log_probs(algo, s).numpy()
    np.testing.assert_allclose(algo.loss(s)["pg_loss"].numpy(), want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("recompute", [True, False])
def test_repeated_passes_over_a_negative_advantage(recompute):
    """SGD on one batch, many times: recomputed, the push fades as the action gets rare.

    With the weight frozen at the batch's arrival the logit falls by about
    lr * |A| per pass for ever (a deterministic policy after a few passes);
    weighted by the current pi / mu it falls only logarithmically.
    """
    algo = _algorithm(clip_pg_rho_threshold=None, entropy_coeff=0.0, value_loss_coeff=0.0,
                      actor_fc_layers=(), recompute_pg_rho=recompute)
    n = 8
    s = dict(_samples(np.random.default_rng(4), n),
             observation=np.zeros((n, 4), np.float32),  # one state: only the bias acts
             action=np.zeros(n, np.int64),
             behaviour_log_prob=np.full(n, np.log(0.5), np.float32),
             advantage=np.full(n, -1.0, np.float32))
    variables = algo.actor_net.trainable_variables
    optimizer = tf.keras.optimizers.SGD(learning_rate=1.0)
    for _ in range(300):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(algo.loss(s)["loss"])
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    prob = float(tf.exp(_log_probs(algo, s))[0])
    if recompute:
        assert 1e-4 < prob < 0.05, prob
    else:
        assert prob < 1e-30, prob
