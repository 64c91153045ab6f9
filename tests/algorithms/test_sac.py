import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import SacAlgorithm
from alf_async.learning.devices import create_strategy
from alf_async.environments import CartPoleBatchedEnv
from alf_async.experience import Experience, LearnBatch
from alf_async.learning.learner import Learner

GAMMA, S = 0.9, 32
TIME_STEP_SPEC = ts.time_step_spec(tf.TensorSpec([3], tf.float32))
ACTION_SPEC = tensor_spec.BoundedTensorSpec([2], tf.float32, -2.0, 2.0)


def _algorithm(monkeypatch=None, **kwargs):
    algo = SacAlgorithm(TIME_STEP_SPEC, ACTION_SPEC, actor_fc_layers=(16,),
                        critic_fc_layers=(16,), discount=GAMMA, initial_alpha=0.5, **kwargs)
    if monkeypatch is not None:  # deterministic losses: the policy's mode instead of a sample
        monkeypatch.setattr(algo, "_sample", lambda dist: dist.mode())
    return algo


def _batch(seed=0, length=1):
    """Windows `[S, length, 1]` with random steps (some LAST) and their bootstrap."""
    rng = np.random.default_rng(seed)
    step_type = rng.choice([1, 2], size=(S, length + 1, 1), p=[0.8, 0.2]).astype(np.int32)
    steps = ts.TimeStep(step_type, rng.normal(size=(S, length + 1, 1)).astype(np.float32),
                        rng.choice([0.0, 1.0], size=(S, length + 1, 1)).astype(np.float32),
                        rng.normal(size=(S, length + 1, 1, 3)).astype(np.float32))
    experience = Experience(
        tf.nest.map_structure(lambda x: tf.constant(x[:, :length]), steps),
        tf.constant(rng.uniform(-2, 2, (S, length, 1, 2)).astype(np.float32)),
        tf.zeros([S, length, 1]), (), tf.zeros([S, length, 1], tf.int64))
    bootstrap = tf.nest.map_structure(lambda x: tf.constant(x[:, length]), steps)
    return LearnBatch(experience, bootstrap, tf.range(S), S * length), steps


def _q(critics, observation, action):
    return np.stack([c((observation, action), step_type=None)[0].numpy() for c in critics])


def test_loss_terms_match_a_numpy_rederivation(monkeypatch):
    algo = _algorithm(monkeypatch)
    for v in algo.target_critics[0].variables:  # targets that differ from the critics
        v.assign(v * 0.5)
    batch, steps = _batch()
    samples = algo.preprocess(batch.experience, batch.bootstrap)
    terms = {k: v.numpy() for k, v in algo.loss(samples).items()}
    obs, next_obs = steps.observation[:, 0, 0], steps.observation[:, 1, 0]
    alpha = 0.5
    next_dist = algo.actor_net(next_obs, step_type=None, network_state=())[0]
    next_action = next_dist.mode()
    next_log_prob = next_dist.log_prob(next_action).numpy()
    target = steps.reward[:, 1, 0] + GAMMA * steps.discount[:, 1, 0] * (
        _q(algo.target_critics, next_obs, next_action).min(0) - alpha * next_log_prob)
    q = _q(algo.critics, obs, batch.experience.action[:, 0, 0])
    np.testing.assert_allclose(terms["critic_loss"], 0.5 * ((q - target) ** 2).sum(0),
                               rtol=1e-4, atol=1e-5)
    dist = algo.actor_net(obs, step_type=None, network_state=())[0]
    action = dist.mode()
    log_prob = dist.log_prob(action).numpy()
    np.testing.assert_allclose(terms["actor_loss"],
                               alpha * log_prob - _q(algo.critics, obs, action).min(0),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(terms["alpha_loss"], -np.log(alpha) * (log_prob - 2.0),
                               rtol=1e-4, atol=1e-5)  # target entropy: -2 action dims
    np.testing.assert_array_equal(samples["mask"].numpy(), steps.step_type[:, 0, 0] != 2)


def test_each_term_trains_its_own_variables_and_targets_follow_slowly():
    algo = _algorithm()
    groups = {term: {v.ref() for v in variables} for term, variables in algo.loss_groups}
    actor = {v.ref() for v in algo.actor_net.trainable_variables}
    critics = {v.ref() for c in algo.critics for v in c.trainable_variables}
    assert groups == {"actor_loss": actor, "critic_loss": critics,
                      "alpha_loss": {algo.log_alpha.ref()}}
    targets = {v.ref() for c in algo.target_critics for v in c.variables}
    assert not targets & {v.ref() for v in algo.variables_to_train}
    learner = Learner(algo, num_epochs=1, num_minibatches=1, learning_rate=1e-2,
                      grad_clip=None)
    before = [v.numpy() for v in algo.target_critics[0].variables]
    learner.train(_batch()[0])
    for critic_v, target_v, old in zip(algo.critics[0].variables,
                                       algo.target_critics[0].variables, before):
        np.testing.assert_allclose(target_v.numpy(), 0.995 * old + 0.005 * critic_v.numpy(),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_replicas_give_the_same_update_as_one(monkeypatch):
    mirrored = create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    with mirrored.scope():
        two_algo = _algorithm(monkeypatch)
    one_algo = _algorithm(monkeypatch)
    for a, b in zip(one_algo.variables, two_algo.variables):
        b.assign(a)
    # One minibatch: the replicas shuffle their halves with seeds of their own.
    kwargs = dict(num_epochs=1, num_minibatches=1, learning_rate=1e-2, grad_clip=None)
    one, two = Learner(one_algo, **kwargs), Learner(two_algo, mirrored, **kwargs)
    for seed in range(3):
        info_one, info_two = one.train(_batch(seed)[0]), two.train(_batch(seed)[0])
    np.testing.assert_allclose(info_one["loss"], info_two["loss"], rtol=1e-4, atol=1e-5)
    for a, b in zip(one_algo.variables, two_algo.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def test_needs_continuous_actions():
    env = CartPoleBatchedEnv(1)
    with pytest.raises(ValueError, match="SacAlgorithm needs a Box action space"):
        SacAlgorithm(env.time_step_spec(), env.action_spec())
