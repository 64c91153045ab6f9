import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import DqnAlgorithm
from alf_async.training.evaluation import GreedyPolicy
from alf_async.algorithms.dqn import apex_epsilons, huber
from alf_async.environments import CartPoleBatchedEnv
from alf_async.experience import Experience
from tests.algorithms.test_advantages import _random_sequences, numpy_n_step_return

GAMMA = 0.9


def _algorithm(**kwargs):
    env = CartPoleBatchedEnv(1)
    return DqnAlgorithm(env.time_step_spec(), env.action_spec(), fc_layers=(16,),
                        discount=GAMMA, **kwargs)


def _windows(rng, n, s=48):
    """Replay windows `[S, n, 1]` and their bootstrap `[S, 1]` from random sequences."""
    rewards, discounts, step_types, _ = _random_sequences(rng, t_len=n, n=s)
    observation = rng.normal(size=(n + 1, s, 4)).astype(np.float32)
    steps = ts.TimeStep(step_types, rewards, discounts, observation)  # [n + 1, S]
    window = lambda x: tf.constant(np.swapaxes(x[:-1], 0, 1)[:, :, None])
    experience = Experience(tf.nest.map_structure(window, steps),
                            tf.constant(rng.integers(0, 2, (s, n, 1))),
                            tf.zeros([s, n, 1]), (), tf.zeros([s, n, 1], tf.int64))
    bootstrap = tf.nest.map_structure(lambda x: tf.constant(x[-1][:, None]), steps)
    return experience, bootstrap, steps


def test_targets_are_double_dqn_n_step_returns_and_the_loss_is_huber():
    rng = np.random.default_rng(0)
    algo = _algorithm()
    for v in algo.target_q_net.variables:  # a target network that differs from the online one
        v.assign(v + rng.normal(scale=0.3, size=v.shape).astype(np.float32))
    experience, bootstrap, steps = _windows(rng, n=3)
    samples = algo.preprocess(experience, bootstrap)
    q = np.stack([algo.q_net(o)[0].numpy() for o in steps.observation])  # [n + 1, S, 2]
    q_target = np.stack([algo.target_q_net(o)[0].numpy() for o in steps.observation])
    values = np.take_along_axis(q_target, q.argmax(-1)[..., None], -1)[..., 0]
    want = numpy_n_step_return(steps.reward, steps.discount, steps.step_type, values, GAMMA)
    valid = steps.step_type[0] != ts.StepType.LAST
    np.testing.assert_array_equal(samples["mask"].numpy(), valid.astype(np.float32))
    np.testing.assert_allclose(samples["target"].numpy()[valid], want[valid], rtol=1e-5,
                               atol=1e-5)
    action = experience.action.numpy()[:, 0, 0]
    terms = algo.loss(samples)
    td = want - q[0][np.arange(len(action)), action]
    want_loss = np.where(np.abs(td) <= 1, 0.5 * td ** 2, np.abs(td) - 0.5)
    np.testing.assert_allclose(terms["loss"].numpy()[valid], want_loss[valid], rtol=1e-4,
                               atol=1e-5)


def test_huber_is_quadratic_then_linear():
    np.testing.assert_allclose(huber(tf.constant([-3.0, -0.5, 0.0, 2.0])).numpy(),
                               [2.5, 0.125, 0.0, 1.5])


def test_epsilon_greedy_frequencies_and_log_probs():
    algo = _algorithm(epsilon_greedy=[(0, 1.0), (100, 0.2)])
    algo.set_env_steps(50)  # epsilon halfway: 0.6
    np.testing.assert_allclose(algo.epsilon.numpy(), 0.6)
    observation = tf.constant(np.tile([[0.1, -0.2, 0.05, 0.3]], (20000, 1)), tf.float32)
    step_type = tf.zeros([20000], tf.int32)
    best = int(algo.act(observation[:1], step_type[:1], (), greedy=True)[0][0])
    action, state, log_prob = algo.act(observation, step_type, ())
    greedy = action.numpy() == best
    assert state == ()
    assert abs(greedy.mean() - (0.4 + 0.3)) < 0.015
    np.testing.assert_allclose(log_prob.numpy(), np.where(greedy, np.log(0.7), np.log(0.3)),
                               rtol=1e-5)
    seeded = [algo.act(observation[:64], step_type[:64], (), seed=tf.constant([1, 2]))[0]
              for _ in range(2)]
    np.testing.assert_array_equal(seeded[0].numpy(), seeded[1].numpy())


def test_the_exported_greedy_policy_takes_argmax_q():
    algo = _algorithm()
    observation = tf.random.normal([32, 4])
    greedy = GreedyPolicy(algo).action(observation)
    np.testing.assert_array_equal(greedy.numpy(),
                                  algo.q_net(observation)[0].numpy().argmax(-1))


def test_needs_discrete_actions():
    spec = ts.time_step_spec(tf.TensorSpec([3], tf.float32))
    with pytest.raises(ValueError, match="DqnAlgorithm needs a Discrete action space"):
        DqnAlgorithm(spec, tensor_spec.BoundedTensorSpec([1], tf.float32, -1.0, 1.0))


def test_apex_epsilons_follow_the_ape_x_rule():
    epsilons = apex_epsilons(num_envs=8, epsilon=0.4, alpha=7.0)
    np.testing.assert_allclose(epsilons, [0.4 ** (1 + 7.0 * i / 7) for i in range(8)])
    assert epsilons[0] == pytest.approx(0.4) and epsilons[-1] == pytest.approx(0.4 ** 8)
    assert apex_epsilons(num_envs=1) == [0.4]
    with pytest.raises(ValueError, match="apex_epsilons.num_envs must be an integer >= 1"):
        apex_epsilons(num_envs=0)
    with pytest.raises(ValueError, match=r"apex_epsilons.epsilon must be in \[0, 1\]"):
        apex_epsilons(num_envs=4, epsilon=1.5)


def _greedy_share_by_env(algo, n=30000):
    """`(greedy, env_id, log_prob)` of `n` rows of one observation, env ids 0-3 in turn."""
    observation = tf.constant(np.tile([[0.1, -0.2, 0.05, 0.3]], (n, 1)), tf.float32)
    step_type = tf.zeros([n], tf.int32)
    best = int(algo.act(observation[:1], step_type[:1], (), greedy=True)[0][0])
    env_id = tf.constant(np.arange(n) % 4, tf.int32)
    action, _, log_prob = algo.act(observation, step_type, (), env_id=env_id)
    return action.numpy() == best, env_id.numpy(), log_prob.numpy()


def test_each_env_explores_at_its_own_epsilon_and_log_probs_follow_it():
    algo = _algorithm(epsilon_per_env=[1.0, 0.0, 0.5], epsilon_greedy=0.0)
    greedy, env_id, log_prob = _greedy_share_by_env(algo)
    for env, epsilon in [(0, 1.0), (1, 0.0), (2, 0.5), (3, 1.0)]:  # env 3 wraps to env 0's
        rows = env_id == env
        assert abs(greedy[rows].mean() - (1 - epsilon / 2)) < 0.02, env
        want = np.where(greedy[rows], np.log(1 - epsilon / 2), np.log(epsilon / 2 + 1e-30))
        np.testing.assert_allclose(log_prob[rows], want, rtol=1e-5)


def test_the_schedule_is_every_envs_floor_and_applies_alone_without_env_ids():
    # A warm-up: while the schedule's epsilon is above an env's own, the env acts with it.
    algo = _algorithm(epsilon_per_env=[0.0, 0.8], epsilon_greedy=[(0, 1.0), (100, 0.0)])
    algo.set_env_steps(60)  # the schedule at 0.4
    greedy, env_id, _ = _greedy_share_by_env(algo)
    for env, epsilon in [(0, 0.4), (1, 0.8), (2, 0.4), (3, 0.8)]:
        assert abs(greedy[env_id == env].mean() - (1 - epsilon / 2)) < 0.02, env
    algo.set_env_steps(100)  # warm-up over: each env's own
    greedy, env_id, _ = _greedy_share_by_env(algo)
    assert greedy[env_id == 0].mean() == 1.0
    assert abs(greedy[env_id == 1].mean() - 0.6) < 0.02
    # Without env ids (evaluation, tests) the schedule's epsilon applies.
    algo.set_env_steps(60)
    observation = tf.constant(np.tile([[0.1, -0.2, 0.05, 0.3]], (4000, 1)), tf.float32)
    step_type = tf.zeros([4000], tf.int32)
    best = int(algo.act(observation[:1], step_type[:1], (), greedy=True)[0][0])
    action, _, _ = algo.act(observation, step_type, ())
    assert abs((action.numpy() == best).mean() - 0.8) < 0.03
