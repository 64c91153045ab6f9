import numpy as np
import pytest
import tensorflow as tf
from tf_agents.trajectories import time_step as ts

from alf_async.algorithms import DqnAlgorithm, ImpalaAlgorithm, PPOAlgorithm
from alf_async.learning.devices import create_strategy
from alf_async.environments import CartPoleBatchedEnv
from alf_async.algorithms import layout
from alf_async.experience import Experience, LearnBatch
from alf_async.learning.learner import Learner, clip_gradients
from alf_async.algorithms.schedules import schedule_value

Q, T, B = 2, 4, 4


def _batch(seed=0, state_spec=()):
    """A random `[Q, T, B]` learn batch; policy states drawn to fit `state_spec`."""
    rng = np.random.default_rng(seed)
    step_type = rng.choice([ts.StepType.MID, ts.StepType.LAST], size=(Q, T, B), p=[0.8, 0.2])
    step_type[:, 1:][step_type[:, :-1] == ts.StepType.LAST] = ts.StepType.FIRST
    time_step = ts.TimeStep(step_type.astype(np.int32), rng.random((Q, T, B), np.float32),
                            np.ones((Q, T, B), np.float32),
                            rng.normal(size=(Q, T, B, 4)).astype(np.float32))
    exp = Experience(time_step, rng.integers(0, 2, (Q, T, B)),
                     np.log(rng.uniform(0.3, 0.7, (Q, T, B))).astype(np.float32),
                     tf.nest.map_structure(
                         lambda s: rng.normal(size=(Q, T, B, *s.shape)).astype(np.float32),
                         state_spec),
                     np.zeros((Q, T, B), np.int64))
    boot = tf.nest.map_structure(lambda x: x[:, 0], time_step)
    return LearnBatch(tf.nest.map_structure(tf.convert_to_tensor, exp),
                      tf.nest.map_structure(tf.convert_to_tensor, boot),
                      tf.range(Q), Q * T * B)


LSTM = dict(lstm_size=(8,), actor_fc_layers=(8,), value_fc_layers=(8,))


DQN = dict(fc_layers=(8,), target_update_period=2)  # the target moves within the test


def _learner(strategy, algorithm_class=PPOAlgorithm, algorithm_kwargs=None, **kwargs):
    env = CartPoleBatchedEnv(1)
    if algorithm_class is not DqnAlgorithm:
        algorithm_kwargs = dict(algorithm_kwargs or {}, entropy_coeff=0.01)
    with strategy.scope():
        algo = algorithm_class(env.time_step_spec(), env.action_spec(),
                               **(algorithm_kwargs or {}))
    return algo, Learner(algo, strategy, **kwargs)


# Settings under which data-parallel updates equal single-device ones: one
# minibatch (replicas shuffle apart), no clipping, a large learning rate.
EQUIVALENCE = dict(num_epochs=1, num_minibatches=1, learning_rate=1e-2, epsilon=1.0,
                   grad_clip=None)


def set_weights(algo, seed=0):
    """Sets every variable of `algo` from a seeded generator (the same in every process)."""
    rng = np.random.default_rng(seed)
    for variable in algo.variables:
        if variable.dtype.is_floating:
            variable.assign(rng.normal(0, 0.3, variable.shape).astype(np.float32))


@pytest.mark.parametrize("algorithm_class, algorithm_kwargs", [
    (PPOAlgorithm, None),
    pytest.param(ImpalaAlgorithm, None, marks=pytest.mark.slow),  # PPO's update, V-trace's targets
    # A recurrent learner on two replicas compiles for ~40 s on 2 cores.
    pytest.param(PPOAlgorithm, LSTM, marks=pytest.mark.slow),
    pytest.param(ImpalaAlgorithm, LSTM, marks=pytest.mark.slow),
    (DqnAlgorithm, DQN)])
def test_two_replicas_give_the_same_update_as_one(algorithm_class, algorithm_kwargs):
    kwargs = EQUIVALENCE
    one_algo, one = _learner(tf.distribute.get_strategy(), algorithm_class, algorithm_kwargs,
                             **kwargs)
    mirrored = create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    two_algo, two = _learner(mirrored, algorithm_class, algorithm_kwargs, **kwargs)
    for a, b in zip(one_algo.variables, two_algo.variables):  # targets too
        b.assign(a)
    before = [v.numpy() for v in one_algo.variables_to_train]
    for seed in range(3):
        info_one = one.train(_batch(seed, one_algo.policy_state_spec))
        info_two = two.train(_batch(seed, one_algo.policy_state_spec))
    np.testing.assert_allclose(info_one["loss"], info_two["loss"], rtol=1e-4, atol=1e-6)
    changed = False
    for a, b, b0 in zip(one_algo.variables_to_train, two_algo.variables_to_train, before):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
        changed |= not np.allclose(a.numpy(), b0)
    assert changed
    assert int(one.train_step) == int(two.train_step) == 3
    assert int(two.env_steps) == 3 * Q * T * B


def test_batch_must_split_across_replicas_and_minibatches():
    _, learner = _learner(create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"]),
                          num_minibatches=3)
    with pytest.raises(ValueError, match="= 3 does not split across 2 replicas"):
        learner.check_batch_shape(num_unrolls=1, unroll_length=4, batch_size=3)
    with pytest.raises(ValueError, match="8 samples .* num_minibatches=3 x num_microbatches=1"):
        learner.check_batch_shape(num_unrolls=1, unroll_length=4, batch_size=4)
    learner.check_batch_shape(num_unrolls=2, unroll_length=3, batch_size=4)


def test_recurrent_batches_split_by_sequence():
    _, learner = _learner(tf.distribute.get_strategy(), algorithm_kwargs=LSTM,
                          num_minibatches=4)
    # Q * B = 8 sequences of any length split into 4 minibatches; 6 do not.
    learner.check_batch_shape(num_unrolls=2, unroll_length=3, batch_size=4)
    with pytest.raises(ValueError, match="6 samples .* num_minibatches=4"):
        learner.check_batch_shape(num_unrolls=2, unroll_length=4, batch_size=3)


def test_unknown_strategy_kind():
    with pytest.raises(ValueError, match="create_strategy.kind must be"):
        create_strategy("tpu")


def test_learning_rate_schedule_is_piecewise_linear_in_env_steps():
    schedule = [(0, 1e-3), (1000, 1e-4)]
    assert schedule_value(3e-4, 123) == 3e-4
    assert schedule_value(schedule, 500) == pytest.approx(5.5e-4)
    assert schedule_value(schedule, 5000) == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="sorted"):
        schedule_value([(10, 1.0), (0, 2.0)], 5)
    _, learner = _learner(tf.distribute.get_strategy(), learning_rate=schedule,
                          num_minibatches=2)
    batch = _batch()
    learner.train(batch)  # at env step 0
    assert float(learner.optimizer.learning_rate) == pytest.approx(1e-3)
    learner.env_steps.assign(500)
    learner.train(batch)
    assert float(learner.optimizer.learning_rate) == pytest.approx(5.5e-4)


def _nan_batch():
    batch = _batch()
    reward = batch.experience.time_step.reward.numpy()
    reward[0, 1, 0] = np.nan
    time_step = batch.experience.time_step._replace(reward=tf.constant(reward))
    return batch._replace(experience=batch.experience._replace(time_step=time_step))


def test_non_finite_gradient_stops_before_the_weights_change():
    algo, learner = _learner(tf.distribute.get_strategy(), num_minibatches=1, num_epochs=1)
    bad = _nan_batch()
    before = [v.numpy() for v in algo.variables_to_train]
    with pytest.raises(FloatingPointError, match="Non-finite loss or gradient in learner "
                                                 "update 1"):
        learner.train(bad)
    for v, b in zip(algo.variables_to_train, before):
        np.testing.assert_array_equal(v.numpy(), b)
    assert int(learner.optimizer.iterations) == 0


def test_microbatch_accumulation_equals_the_full_minibatch_update():
    # The same seed: the same minibatch shuffles.
    kwargs = dict(num_epochs=2, num_minibatches=2, learning_rate=1e-2, epsilon=1.0, seed=7)
    whole_algo, whole = _learner(tf.distribute.get_strategy(), **kwargs)
    micro_algo, micro = _learner(tf.distribute.get_strategy(), num_microbatches=4, **kwargs)
    for a, b in zip(whole_algo.variables_to_train, micro_algo.variables_to_train):
        b.assign(a)
    info_whole = whole.train(_batch())
    info_micro = micro.train(_batch())
    np.testing.assert_allclose(info_whole["loss"], info_micro["loss"], rtol=1e-4, atol=1e-6)
    for a, b in zip(whole_algo.variables_to_train, micro_algo.variables_to_train):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)


def test_rmsprop_and_entropy_schedule():
    algo, learner = _learner(tf.distribute.get_strategy(), optimizer="rmsprop",
                             rmsprop_decay=0.95, momentum=0.5, num_minibatches=2)
    assert isinstance(learner.optimizer, tf.keras.optimizers.RMSprop)
    algo.mutable_settings["entropy_coeff"].schedule = [(0, 0.1), (100, 0.0)]
    learner.env_steps.assign(50)
    learner.train(_batch())
    assert float(algo.entropy_coeff) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="must be 'adam', 'amsgrad' or 'rmsprop', got 'sgd'"):
        _learner(tf.distribute.get_strategy(), optimizer="sgd")


def test_non_finite_update_can_be_skipped_and_counted():
    algo, learner = _learner(tf.distribute.get_strategy(), num_minibatches=1, num_epochs=1,
                             skip_nonfinite_updates=True)
    before = [v.numpy() for v in algo.variables_to_train]
    assert learner.train(_nan_batch()) == {}
    assert learner.skipped_updates == 1
    for v, b in zip(algo.variables_to_train, before):
        np.testing.assert_array_equal(v.numpy(), b)
    info = learner.train(_batch())  # training goes on
    assert np.isfinite(info["loss"]) and int(learner.optimizer.iterations) == 1


class _TwoTermAlgorithm(tf.Module):
    """Loss terms `(a b - 1)^2` for `a` and `b^2` for `b` (SAC-style loss groups).

    The learner never acts: `act` and the specs are there for the contract only.
    """

    time_step_spec = action_spec = policy_state_spec = ()
    recurrent = False
    burn_in = 0
    item_terms = ()
    mutable_settings = {}

    def act(self, observation, step_type, policy_state, greedy=False, seed=None):
        raise AssertionError("the learner does not act")

    def __init__(self):
        super().__init__()
        self.a, self.b = tf.Variable(1.0), tf.Variable(0.25)
        self.loss_groups = [("fit", [self.a]), ("shrink", [self.b])]
        self.variables_to_train = [self.a, self.b]
        self.target = tf.Variable(0.0)

    def observe(self, batch):
        del batch

    def set_env_steps(self, env_steps):
        del env_steps

    def preprocess(self, experience, bootstrap):
        del bootstrap
        return dict(mask=tf.ones_like(layout.flatten_time(experience.log_prob)))

    def loss(self, samples):
        fit = tf.square(self.a * self.b - 1.0) * samples["mask"]
        shrink = tf.square(self.b) * samples["mask"]
        return dict(loss=fit + shrink, fit=fit, shrink=shrink)

    def scalars(self):
        return {"target": self.target}

    def after_sgd_step(self):
        self.target.assign_add(1.0)


def test_loss_groups_route_each_term_to_its_variables_and_the_hook_runs_per_step():
    algo = _TwoTermAlgorithm()
    learner = Learner(algo, num_epochs=1, num_minibatches=2, learning_rate=0.1,
                      grad_clip=None)
    learner.train(_batch())
    # d fit / d b = -1.5 and d shrink / d b = 0.5: b follows shrink alone (down), not
    # the sum (up); a follows fit (up).
    assert algo.b.numpy() < 0.25 and algo.a.numpy() > 1.0
    assert algo.target.numpy() == 2.0  # once per optimizer step


def test_gradients_are_clipped_together_or_per_group():
    grads = [tf.constant([3.0, 4.0]), tf.constant([0.1])]  # norms 5 and 0.1
    norm = tf.linalg.global_norm(grads)
    together = clip_gradients(grads, 1.0, norm)
    np.testing.assert_allclose(together[1].numpy(), [0.1 / norm.numpy()], rtol=1e-6)
    apart = clip_gradients(grads, 1.0, norm, group_sizes=[1, 1])
    np.testing.assert_allclose(apart[0].numpy(), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(apart[1].numpy(), [0.1], rtol=1e-6)  # below the clip: kept


def test_learner_clips_each_loss_group_apart_when_asked():
    def steps(**settings):  # a huge Adam epsilon makes the first step proportional to the gradient
        algo = _TwoTermAlgorithm()  # gradients: a -0.375, b 0.5; global norm 0.625
        Learner(algo, num_epochs=1, num_minibatches=1, learning_rate=10.0, epsilon=10.0,
                grad_clip=0.1, **settings).train(_batch())
        return np.array([algo.a.numpy() - 1.0, 0.25 - algo.b.numpy()])
    together, apart = steps(), steps(clip_per_group=True)
    np.testing.assert_allclose(together[0] / together[1], 0.375 / 0.5, rtol=1e-2)
    # together: both scaled by 0.1 / 0.625; apart: each to a norm of 0.1
    np.testing.assert_allclose(apart / together, [0.1 / 0.06, 0.1 / 0.08], rtol=1e-2)


@pytest.mark.parametrize("replicas", [1, 2])
def test_importance_weights_scale_the_loss_and_td_errors_come_back_per_column(replicas):
    strategy = (tf.distribute.get_strategy() if replicas == 1 else
                create_strategy("mirrored", devices=["/cpu:0", "/cpu:1"]))
    algo, learner = _learner(strategy, DqnAlgorithm, DQN, **EQUIVALENCE)
    set_weights(algo)
    weights = np.random.default_rng(1).uniform(0.1, 1.0, (Q, B)).astype(np.float32)
    batch = _batch(2)._replace(weights=tf.constant(weights), wants_back=("td_error",))

    def terms():  # the algorithm's own samples: one per column (window), columns q * B + b
        with strategy.scope():
            samples = algo.preprocess(batch.experience, batch.bootstrap)
            return samples["mask"].numpy(), algo.loss(samples)

    mask, before = terms()
    update = learner.update(learner.place(batch))
    want = (before["loss"].numpy() * mask * weights.reshape(-1)).sum() / mask.sum()
    np.testing.assert_allclose(update.losses["loss"], want, rtol=1e-5)
    unweighted = (before["loss"].numpy() * mask).sum() / mask.sum()
    assert abs(want - unweighted) > 1e-3 * abs(unweighted)  # the weights matter here
    # The TD errors come back after the update, one per column, in column order.
    _, after = terms()
    assert update.per_item["td_error"].shape == (1, Q * B)
    np.testing.assert_allclose(update.per_item["td_error"][0], after["td_error"].numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(update.per_item["mask"][0], mask)
    assert not np.allclose(after["td_error"].numpy(), before["td_error"].numpy())
    # What comes back is what the batch's source asked for, weights or not.
    assert learner.update(learner.place(_batch(3))).per_item == {}  # none asked
    asked = learner.update(learner.place(_batch(4)._replace(wants_back=("td_error",))))
    assert sorted(asked.per_item) == ["mask", "td_error"]
    assert asked.per_item["td_error"].shape == (1, Q * B)


def test_new_mutable_settings_survive_the_restore_of_a_checkpoint_made_with_the_old(tmp_path):
    """ray#62173's class of bug: a checkpoint holds the optimizer's learning rate and the
    algorithm's mutable settings in variables, so a restore writes the old values over
    the new ones. After `mutable.follow()` the learner reports the new values, and
    its update uses them: with one Adam step from the same state on the same batch,
    the step is exactly proportional to the learning rate."""
    strategy = tf.distribute.get_strategy()
    one_step = dict(num_epochs=1, num_minibatches=1, grad_clip=None, seed=5)
    env = CartPoleBatchedEnv(1)

    def learner(learning_rate, **algorithm_kwargs):
        algo = PPOAlgorithm(env.time_step_spec(), env.action_spec(), actor_fc_layers=(8,),
                            value_fc_layers=(8,), **algorithm_kwargs)
        return algo, Learner(algo, strategy, learning_rate=learning_rate, **one_step)

    algo, first = learner(1e-3, clip_ratio=0.2, discount=0.99, entropy_coeff=0.01)
    first.train(_batch(0))
    saved = tf.train.Checkpoint(algorithm=algo, learner=first).save(str(tmp_path / "ckpt"))

    def one_update_after_the_restore(learning_rate, **algorithm_kwargs):
        algo, resumed = learner(learning_rate, **algorithm_kwargs)
        tf.train.Checkpoint(algorithm=algo, learner=resumed).restore(saved).assert_consumed()
        resumed.mutable.follow()
        reported = resumed.mutable.trains_with()
        before = [v.numpy().copy() for v in algo.variables_to_train]
        resumed.train(_batch(1))
        return reported, [v.numpy() - b for v, b in zip(algo.variables_to_train, before)]

    old, old_step = one_update_after_the_restore(1e-3, clip_ratio=0.2, discount=0.99,
                                                 entropy_coeff=0.01)
    new, new_step = one_update_after_the_restore(4e-3, clip_ratio=0.2, discount=0.99,
                                                 entropy_coeff=0.01)
    assert old["learning_rate"] == pytest.approx(1e-3)
    assert new["learning_rate"] == pytest.approx(4e-3)
    assert max(np.abs(step).max() for step in old_step) > 1e-5  # the update moved them
    for before, after in zip(old_step, new_step):
        np.testing.assert_allclose(after, 4 * before, rtol=1e-3, atol=1e-6)  # float32 weights
    others, _ = one_update_after_the_restore(1e-3, clip_ratio=0.1, discount=0.9,
                                             entropy_coeff=0.05)
    assert others == pytest.approx(dict(learning_rate=1e-3, clip_ratio=0.1, discount=0.9,
                                        entropy_coeff=0.05))
