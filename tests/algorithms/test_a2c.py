"""A2C (`alf_async/algorithms/a2c.py`), the algorithm written by following docs/algorithms.md."""

import numpy as np
import tensorflow as tf

from alf_async.algorithms import A2cAlgorithm, PPOAlgorithm
from fakes import actor_critic_samples, cartpole_actor_critic


def test_loss_is_the_log_prob_times_the_advantage_plus_value_and_entropy_terms():
    algo = cartpole_actor_critic(A2cAlgorithm, value_loss_coeff=0.5, entropy_coeff=0.01)
    s = actor_critic_samples(np.random.default_rng(3))
    terms = {k: v.numpy() for k, v in algo.loss(s).items()}
    dist, _ = algo.actor_net(s["observation"], step_type=s["step_type"], network_state=())
    logits = dist.logits_parameter().numpy()
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    chosen = log_p[np.arange(len(s["action"])), s["action"]]
    value, _ = algo.value_net(s["observation"], step_type=s["step_type"])
    vloss = 0.5 * (value.numpy() - s["value_target"]) ** 2
    entropy = -(np.exp(log_p) * log_p).sum(-1)
    np.testing.assert_allclose(terms["pg_loss"], -chosen * s["advantage"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(terms["loss"], -chosen * s["advantage"] + 0.5 * vloss
                               - 0.01 * entropy, rtol=1e-4, atol=1e-5)


def test_on_fresh_data_its_policy_gradient_is_ppos():
    """With the behaviour log-probs equal to the current ones (ratio 1, no clipping)
    PPO's surrogate has the plain policy gradient."""
    a2c = cartpole_actor_critic(A2cAlgorithm)
    ppo = cartpole_actor_critic(PPOAlgorithm)
    for mine, theirs in zip(a2c.actor_net.variables, ppo.actor_net.variables):
        theirs.assign(mine)
    s = actor_critic_samples(np.random.default_rng(4))
    dist, _ = a2c.actor_net(s["observation"], step_type=s["step_type"], network_state=())
    s["behaviour_log_prob"] = dist.log_prob(s["action"]).numpy()
    grads = []
    for algo in (a2c, ppo):
        with tf.GradientTape() as tape:
            pg = tf.reduce_mean(algo.loss(s)["pg_loss"])
        grads.append(tape.gradient(pg, algo.actor_net.trainable_variables))
    for mine, theirs in zip(*grads):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-6)
