"""R2D2: targets over a stored-state sequence, the burn-in without gradient, settings."""

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import R2d2Algorithm
from alf_async.algorithms.r2d2 import rescale, unrescale
from alf_async.environments import CartPoleBatchedEnv
from alf_async.training.evaluation import GreedyPolicy
from alf_async.experience import Experience
from tests.algorithms.test_advantages import _random_sequences

GAMMA, BURN_IN, T, S = 0.9, 3, 5, 6


def _algorithm(**kwargs):
    env = CartPoleBatchedEnv(1)
    settings = dict(fc_layers=(16,), lstm_size=(8,), burn_in=BURN_IN, n_step=1, discount=GAMMA)
    return R2d2Algorithm(env.time_step_spec(), env.action_spec(), **dict(settings, **kwargs))


def _sequences(rng, algo):
    """Replayed sequences `[S, burn_in + T, 1]`, their bootstrap `[S, 1]`, the steps
    time-major `[L + 1, S]` and the stored state `[S, 8]` (h and c)."""
    length = BURN_IN + T
    rewards, discounts, step_types, _ = _random_sequences(rng, t_len=length, n=S)
    step_types[0] = ts.StepType.MID  # a sequence may start mid-episode
    observation = rng.normal(size=(length + 1, S, 4)).astype(np.float32)
    steps = ts.TimeStep(step_types, rewards, discounts, observation)
    state = [rng.normal(size=(S, 8)).astype(np.float32) for _ in algo.q_net.state_spec]
    per_step = lambda x: tf.constant(np.repeat(x[:, None, None], length, axis=1))
    experience = Experience(
        tf.nest.map_structure(lambda x: tf.constant(np.swapaxes(x[:-1], 0, 1)[:, :, None]),
                              steps),
        tf.constant(rng.integers(0, 2, (S, length, 1))), tf.zeros([S, length, 1]),
        [per_step(x) for x in state], tf.zeros([S, length, 1], tf.int64))
    bootstrap = tf.nest.map_structure(lambda x: tf.constant(x[-1][:, None]), steps)
    return experience, bootstrap, steps, state


def _step_by_step(net, steps, state):
    """`[L + 1, S, 2]` Q-values of `net` acting one step at a time from `state`."""
    out = []
    for t in range(steps.observation.shape[0]):
        q, state = net(tf.constant(steps.observation[t]),
                       step_type=tf.constant(steps.step_type[t]), network_state=state)
        out.append(q.numpy())
    return np.stack(out)


def test_targets_are_double_q_from_the_stored_state_over_the_whole_sequence():
    rng = np.random.default_rng(0)
    algo = _algorithm()
    for v in algo.target_q_net.variables:  # a target network that differs from the online one
        v.assign(v + rng.normal(scale=0.3, size=v.shape).astype(np.float32))
    experience, bootstrap, steps, state = _sequences(rng, algo)
    samples = algo.preprocess(experience, bootstrap)
    stored = [tf.constant(x) for x in state]
    q = _step_by_step(algo.q_net, steps, stored)  # as the actor acted, from its state
    q_target = _step_by_step(algo.target_q_net, steps, stored)
    values = np.take_along_axis(q_target, q.argmax(-1)[..., None], -1)[..., 0]  # [L + 1, S]
    want = steps.reward[1:] + GAMMA * steps.discount[1:] * values[1:]  # n = 1
    mask = (steps.step_type[:-1] != ts.StepType.LAST)[BURN_IN:].T  # [S, T]: trained steps
    assert samples["target"].shape == (S, T) and samples["observation"].shape == (S, 8, 4)
    np.testing.assert_array_equal(samples["mask"].numpy(), mask.astype(np.float32))
    np.testing.assert_allclose(samples["target"].numpy()[mask], want[BURN_IN:].T[mask],
                               rtol=1e-4, atol=1e-5)
    # The online Q of the trained steps, burnt in from the stored state, is the actor's.
    action = experience.action.numpy()[:, BURN_IN:, 0]
    terms = algo.loss(samples)
    acted = np.take_along_axis(q[BURN_IN:-1].swapaxes(0, 1), action[..., None], -1)[..., 0]
    np.testing.assert_allclose(terms["q_value"].numpy(), acted, rtol=1e-4, atol=1e-5)


def test_the_burn_in_steps_give_no_gradient_and_the_trained_steps_do():
    rng = np.random.default_rng(1)
    algo = _algorithm()
    experience, bootstrap, _, _ = _sequences(rng, algo)
    samples = algo.preprocess(experience, bootstrap)
    samples["mask"] = tf.ones_like(samples["mask"])
    with tf.GradientTape() as tape:
        tape.watch(samples["observation"])
        loss = tf.reduce_sum(algo.loss(samples)["loss"])
    grad = tape.gradient(loss, samples["observation"]).numpy()  # [S, burn_in + T, 4]
    assert (grad[:, :BURN_IN] == 0).all()
    assert (np.abs(grad[:, BURN_IN:]).sum(axis=(0, 2)) > 0).all()


def test_acting_carries_the_lstm_state_and_the_greedy_policy_is_recurrent():
    algo = _algorithm(epsilon_greedy=0.0)
    observation = tf.random.normal([4, 4])
    mid = tf.fill([4], ts.StepType.MID)
    state = [tf.zeros([4, 8])] * 2
    _, after_one, _ = algo.act(observation, mid, state)
    _, after_two, _ = algo.act(observation, mid, after_one)
    assert not np.allclose(after_one[0].numpy(), after_two[0].numpy())
    policy = GreedyPolicy(algo)
    action, carried = policy.action(observation, mid, after_one)
    q, _ = algo.q_net(observation, step_type=mid, network_state=after_one)
    np.testing.assert_array_equal(action.numpy(), q.numpy().argmax(-1))
    np.testing.assert_allclose(carried[0].numpy(), after_two[0].numpy(), rtol=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(burn_in=-1), "R2d2Algorithm.burn_in must be an integer >= 0, got -1"),
    (dict(n_step=0), "R2d2Algorithm.n_step must be an integer >= 1, got 0"),
    (dict(lstm_size=()), "R2d2Algorithm.lstm_size must name at least one LSTM layer")])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _algorithm(**kwargs)


def test_value_rescaling_inverts_and_rescaled_targets_are_h_of_the_return():
    x = tf.constant([-500.0, -3.0, -0.5, 0.0, 0.7, 12.0, 1e4])
    np.testing.assert_allclose(unrescale(rescale(x)).numpy(), x.numpy(), rtol=1e-4, atol=1e-4)
    assert rescale(tf.constant(99.0)).numpy() == pytest.approx(9.0 + 0.099, rel=1e-5)
    rng = np.random.default_rng(2)
    plain, rescaled = _algorithm(), _algorithm(value_rescaling=True)
    for a, b in zip(plain.variables, rescaled.variables):
        b.assign(a)
    experience, bootstrap, steps, _ = _sequences(rng, plain)
    want_values = plain.preprocess(experience, bootstrap)["target"].numpy()
    got = rescaled.preprocess(experience, bootstrap)["target"].numpy()
    # n = 1: plain target = r + gamma d v; rescaled = h(r + gamma d h^-1(v)).
    reward = steps.reward[1:][BURN_IN:].T
    discount = steps.discount[1:][BURN_IN:].T
    values = (want_values - reward) / np.where(discount > 0, GAMMA * discount, 1.0)
    want = rescale(tf.constant(reward + GAMMA * discount * unrescale(tf.constant(values))))
    mask = rescaled.preprocess(experience, bootstrap)["mask"].numpy() > 0
    mask &= discount > 0
    np.testing.assert_allclose(got[mask], want.numpy()[mask], rtol=1e-4, atol=1e-4)
