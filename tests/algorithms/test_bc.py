import numpy as np
import pytest
import tensorflow as tf
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import BcAlgorithm
from alf_async.algorithms.contract import check_algorithm
from alf_async.experience import Experience, LearnBatch
from alf_async.learning.learner import Learner

S = 256
TIME_STEP_SPEC = ts.time_step_spec(tf.TensorSpec([3], tf.float32))
DISCRETE = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 1)
BOX = tensor_spec.BoundedTensorSpec([2], tf.float32, -1.0, 1.0)


def expert(observation, action_spec):
    """The behaviour policy that made the data: a step function, or a linear map."""
    if action_spec.dtype.is_integer:
        return (observation[:, 0] > 0).astype(np.int64)
    return np.clip(0.6 * observation[:, 1:], -1, 1).astype(np.float32)


def windows(rng, action_spec, last_share=0.2):
    """`[S, 1, 1]` windows of the expert's steps; a LAST step's action is garbage."""
    observation = rng.normal(size=(S, 3)).astype(np.float32)
    step_type = np.where(rng.random(S) < last_share, 2, 1).astype(np.int32)
    action = expert(observation, action_spec)
    garbage = (1 - action) if action_spec.dtype.is_integer else -action
    action = np.where((step_type == 2).reshape((S,) + (1,) * (action.ndim - 1)), garbage, action)
    column = lambda x: tf.constant(x[:, None, None])
    time_step = ts.TimeStep(column(step_type), column(np.zeros(S, np.float32)),
                            column(np.ones(S, np.float32)), column(observation))
    bootstrap = ts.TimeStep(tf.ones([S, 1], tf.int32), tf.zeros([S, 1]), tf.ones([S, 1]),
                            tf.zeros([S, 1, 3]))
    return LearnBatch(Experience(time_step, column(action), tf.zeros([S, 1, 1]), (),
                                 tf.zeros([S, 1, 1], tf.int64)), bootstrap, tf.fill([S], -1), 0)


@pytest.mark.parametrize("action_spec", [DISCRETE, BOX], ids=["discrete", "box"])
def test_bc_imitates_the_behaviour_policy_and_ignores_last_steps_actions(action_spec):
    algo = BcAlgorithm(TIME_STEP_SPEC, action_spec, fc_layers=(32, 32))
    check_algorithm(algo)
    learner = Learner(algo, num_epochs=1, num_minibatches=1, learning_rate=3e-3)
    rng = np.random.default_rng(0)
    first = learner.train(windows(rng, action_spec))["loss"].numpy()
    for _ in range(300):
        last = learner.train(windows(rng, action_spec))["loss"].numpy()
    assert last < first - 0.5
    test = rng.normal(size=(500, 3)).astype(np.float32)
    action, _, _ = algo.act(tf.constant(test), tf.ones([500], tf.int32), (), greedy=True)
    if action_spec.dtype.is_integer:
        # A LAST step's garbage action counted would pull this towards 0.8.
        assert np.mean(action.numpy() == expert(test, action_spec)) > 0.95
    else:
        assert np.mean(np.abs(action.numpy() - expert(test, action_spec))) < 0.1


def test_preprocess_masks_last_steps_and_keeps_every_other_step():
    algo = BcAlgorithm(TIME_STEP_SPEC, DISCRETE, fc_layers=(8,))
    batch = windows(np.random.default_rng(1), DISCRETE)
    samples = algo.preprocess(batch.experience, batch.bootstrap)
    step_type = batch.experience.time_step.step_type.numpy()[:, 0, 0]
    np.testing.assert_array_equal(samples["mask"].numpy(), (step_type != 2).astype(np.float32))
    np.testing.assert_array_equal(samples["action"].numpy(), batch.experience.action.numpy()[:, 0, 0])
    sampled, _, log_prob = algo.act(samples["observation"], tf.ones([S], tf.int32), ())
    assert sampled.dtype == tf.int64 and log_prob.shape == [S]
