import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import PPOAlgorithm
from alf_async.algorithms.normalization import Normalization
from alf_async.learning.devices import create_strategy
from alf_async.training.evaluation import GreedyPolicy, export_policy
from alf_async.experience import Experience, LearnBatch
from alf_async.learning.learner import Learner

Q, T, B = 3, 5, 4
OBS = tensor_spec.TensorSpec([3], tf.float32)
ACTION = tensor_spec.BoundedTensorSpec([1], tf.float32, -2.0, 2.0)


def _time_step(observation, reward=None, step_type=None):
    shape = observation.shape[:3]
    return ts.TimeStep(
        tf.constant(np.full(shape, ts.StepType.MID) if step_type is None else step_type,
                    tf.int32),
        tf.constant(np.ones(shape) if reward is None else reward, tf.float32),
        tf.ones(shape, tf.float32), tf.constant(observation, tf.float32))


def _batch(observation, env_ids=None, num_new=Q, reward=None, step_type=None):
    """A `LearnBatch` of `[Q', T, B]` steps; only `num_new` unrolls count as new."""
    time_step = _time_step(observation, reward, step_type)
    q = observation.shape[0]
    experience = Experience(time_step, tf.zeros([q, T, B, 1]), tf.zeros([q, T, B]), ((), ()),
                            tf.zeros([q, T, B], tf.int64))
    return LearnBatch(experience, tf.nest.map_structure(lambda x: x[:, 0], time_step),
                      tf.constant(np.arange(q) if env_ids is None else env_ids, tf.int32),
                      num_new * T * B)


def _algorithm(**kwargs):
    return PPOAlgorithm(ts.time_step_spec(OBS), ACTION, actor_fc_layers=(8,),
                        value_fc_layers=(8,), **kwargs)


def test_observation_statistics_come_from_the_new_unrolls_only():
    rng = np.random.default_rng(0)
    observation = rng.normal([1.0, -3.0, 10.0], [0.5, 2.0, 4.0], size=(Q, T, B, 3))
    observation[-1] = 1e4  # a replayed unroll: must not count
    norm = Normalization(OBS, 0.99, normalize_observations=True)
    norm.observe(_time_step(observation), np.arange(Q), num_new=Q - 1)
    new = observation[:-1].reshape(-1, 3)
    got = norm.observation(tf.constant(new, tf.float32)).numpy()
    np.testing.assert_allclose(got.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(got.std(0), 1.0, rtol=0.02)  # variance_epsilon=1e-3


def test_rewards_are_scaled_by_the_std_of_returns_carried_across_batches():
    norm = Normalization(OBS, 0.5, normalize_rewards=True)
    obs = np.zeros((1, T, B, 3))
    step_type = np.full((1, T, B), ts.StepType.MID)
    step_type[0, 2, 0] = ts.StepType.FIRST  # sub-env 0 starts a new episode at t = 2
    reward = np.ones((1, T, B))
    reward[0, 2, 0] = 0.0
    returns = []
    for _ in range(2):  # the second batch continues the first one's returns
        norm.observe(_time_step(obs, reward, step_type), [7], num_new=1)
    running = np.zeros(B)
    for _ in range(2):
        for t in range(T):
            first = step_type[0, t] == ts.StepType.FIRST
            running = np.where(first, 0.0, 0.5 * running + reward[0, t])
            returns.extend(running)
    want = 3.0 / np.sqrt(np.var(returns) + 1e-3)
    np.testing.assert_allclose(norm.reward(tf.constant(3.0)).numpy(), want, rtol=1e-4)
    # Carried: the last returns approach 1 / (1 - 0.5) = 2, not the first batch's 1.75.
    assert max(returns) > 1.9


def test_off_by_default_and_float_observations_only():
    norm = Normalization(OBS, 0.99)
    x = tf.constant([[5.0, 6.0, 7.0]])
    assert norm.observation(x) is x and norm.reward(x) is x and not norm.variables
    with pytest.raises(ValueError, match="normalize_observations needs float"):
        Normalization(tensor_spec.TensorSpec([2], tf.uint8), 0.99, normalize_observations=True)


def _observed_algorithm():
    algo = _algorithm(normalize_observations=True, normalize_rewards=True)
    rng = np.random.default_rng(1)
    algo.observe(_batch(rng.normal(5.0, 3.0, size=(Q, T, B, 3))))
    return algo


def test_actors_learner_and_exported_policy_see_the_same_normalised_observations(tmp_path):
    algo = _observed_algorithm()
    obs = np.random.default_rng(2).normal(5.0, 3.0, size=(6, 3)).astype(np.float32)
    normalised = algo.normalization.observation(obs)
    raw_mean = algo.actor_net(obs, step_type=None, network_state=(), training=False)[0].mode().numpy()
    want = algo.actor_net(normalised, step_type=None, network_state=(), training=False)[0].mode().numpy()
    assert not np.allclose(raw_mean, want, atol=1e-3)  # normalising changes the actions
    acted, _, _ = algo.act(obs, tf.ones([6], tf.int32), ((), ()), greedy=True)
    np.testing.assert_allclose(acted.numpy(), want, atol=1e-6)
    np.testing.assert_allclose(GreedyPolicy(algo).action(obs).numpy(), want, atol=1e-6)
    loaded = tf.saved_model.load(export_policy(algo, str(tmp_path)))
    np.testing.assert_allclose(loaded.action(obs).numpy(), want, atol=1e-6)


def test_statistics_are_checkpointed(tmp_path):
    algo = _observed_algorithm()
    path = tf.train.Checkpoint(algorithm=algo).save(str(tmp_path / "ckpt"))
    fresh = _algorithm(normalize_observations=True, normalize_rewards=True)
    tf.train.Checkpoint(algorithm=fresh).restore(path).assert_existing_objects_matched()
    obs = tf.constant([[1.0, 2.0, 30.0]])
    np.testing.assert_allclose(fresh.normalization.observation(obs),
                               algo.normalization.observation(obs))
    np.testing.assert_allclose(fresh.normalization.reward(obs), algo.normalization.reward(obs))


def test_learner_place_updates_the_statistics_on_one_or_two_replicas():
    batch = _batch(np.random.default_rng(3).normal(-4.0, 0.5, size=(Q - 1, T, B, 3)),
                   num_new=Q - 1)
    probe = tf.constant([[-4.0, -4.0, -4.0]])
    results = []
    for strategy in [tf.distribute.get_strategy(),
                     create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])]:
        with strategy.scope():
            algo = _algorithm(normalize_observations=True)
        Learner(algo, strategy, num_minibatches=1).place(batch)
        results.append(algo.normalization.observation(probe).numpy())
    np.testing.assert_allclose(results[0], results[1], atol=1e-6)
    assert np.all(np.abs(results[0]) < 0.5)  # -4 is near the observed mean now
