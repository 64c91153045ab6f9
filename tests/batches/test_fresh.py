"""`FreshBatches` on scripted unrolls: policy-lag filter, env order, mix-in replay."""

import time

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches import FreshBatches
from alf_async.experience import Experience, Unroll
from alf_async.collection.pacing import Lockstep
from alf_async.collection.queues import NestFIFOQueue
from fakes import learning_driver, timed_stop

T, B = 3, 2
DRIVER_B = 3  # learning_driver's sub-envs


def _unroll(env_id: int, version: int, first: int = 0) -> Unroll:
    """One `[T, B]` unroll of `env_id` acted on by `version`; observations count from `first`."""
    counts = tf.constant(np.arange(first, first + T)[:, None] * np.ones(B), tf.float32)
    return Unroll(Experience(counts, tf.zeros([T, B], tf.int64), tf.zeros([T, B]), (),
                             tf.fill([T, B], tf.constant(version, tf.int64))),
                  tf.zeros([B]), tf.constant(env_id, tf.int32))


class ScriptedQueue:
    """`take(n)`: the next n of the given unrolls, stacked to `[n, T, B]`; records each n."""

    def __init__(self, unrolls):
        self._unrolls = list(unrolls)
        self.asked = []

    def take(self, n: int):
        self.asked.append(n)
        taken, self._unrolls = self._unrolls[:n], self._unrolls[n:]
        return tf.nest.map_structure(lambda *xs: tf.stack(xs), *taken)


def test_unrolls_over_the_lag_at_the_update_they_meet_are_replaced_in_arrival_order():
    version = tf.Variable(10, dtype=tf.int64)
    queue = ScriptedQueue([_unroll(0, 9), _unroll(1, 7), _unroll(2, 8), _unroll(3, 10)])
    source = FreshBatches(queue.take, version, learn_queue_cap=2, max_policy_lag=2)
    # Trained one update from now (at 11): lags 2, 4 -> drop env 1; then 8 (lag 3) -> drop.
    batch = source.next(updates_ahead=1)
    assert queue.asked == [2, 1, 1]
    np.testing.assert_array_equal(batch.env_ids.numpy(), [0, 3])
    np.testing.assert_array_equal(batch.experience.policy_version.numpy()[:, 0, 0], [9, 10])
    assert source.summaries() == {"learner/dropped_unrolls": 2}
    assert batch.env_steps == 2 * T * B and source.shape(T, B) == (2, T, B)


def test_without_a_lag_bound_every_unroll_is_kept():
    queue = ScriptedQueue([_unroll(0, 0), _unroll(1, 0)])
    source = FreshBatches(queue.take, tf.Variable(1000, dtype=tf.int64), learn_queue_cap=2)
    np.testing.assert_array_equal(source.next().env_ids.numpy(), [0, 1])
    assert source.summaries() == {"learner/dropped_unrolls": 0}


def test_deterministic_permits_let_each_env_run_its_share_and_the_batch_is_in_env_order():
    permits = [NestFIFOQueue(2, tf.TensorSpec([], tf.int32), name=f"p{i}") for i in range(2)]
    queue = ScriptedQueue([_unroll(1, 0, 0), _unroll(0, 0, 0), _unroll(0, 0, 3),
                           _unroll(1, 0, 3)])
    source = FreshBatches(queue.take, tf.Variable(0, dtype=tf.int64), learn_queue_cap=4,
                          permits=permits, pace=Lockstep(seed=1, num_envs=2, learn_queue_cap=4))
    batch = source.next()
    assert [int(p.size()) for p in permits] == [2, 2]  # Q / E = 2 unrolls each
    np.testing.assert_array_equal(batch.env_ids.numpy(), [0, 0, 1, 1])
    # An env's unrolls keep their order (a stable sort).
    np.testing.assert_array_equal(batch.experience.time_step.numpy()[:, 0, 0], [0, 3, 0, 3])


def test_mix_in_replay_appends_recent_unrolls_and_counts_only_new_env_steps():
    queue = ScriptedQueue([_unroll(i % 2, 0, first=10 * i) for i in range(8)])
    source = FreshBatches(queue.take, tf.Variable(0, dtype=tf.int64), learn_queue_cap=2,
                          seed=0, replay_proportion=0.5, replay_buffer_num_slots=2)
    assert source.shape(T, B) == (3, T, B)
    for k in range(4):
        batch = source.next()
        firsts = batch.experience.time_step.numpy()[:, 0, 0]
        np.testing.assert_array_equal(firsts[:2], [20 * k, 20 * k + 10])
        assert firsts[2] in firsts[:2]  # the 2 slots hold this batch's new unrolls
        assert batch.env_steps == 2 * T * B


@pytest.mark.parametrize("settings, message", [
    (dict(replay_proportion=0.3), "replay_proportion \\* AsyncOffPolicyDriver.learn_queue_cap "
                                  "must be a whole number >= 0"),
    (dict(replay_proportion=-0.5), "whole number >= 0"),
    (dict(replay_proportion=0.5), "FreshBatches.replay_buffer_num_slots must be >= 1"),
])
def test_settings_that_cannot_work_name_themselves(settings, message):
    with pytest.raises(ValueError, match=message):
        FreshBatches(ScriptedQueue([]).take, tf.Variable(0, dtype=tf.int64),
                     learn_queue_cap=2, **settings)


# --- in a driver --------------------------------------------------------------------

@pytest.mark.parametrize("max_policy_lag", [None, 1])
def test_unrolls_older_than_max_policy_lag_are_dropped_and_counted(max_policy_lag):
    version = tf.Variable(0, dtype=tf.int64)
    driver = learning_driver(version, bindings={"FreshBatches.max_policy_lag": max_policy_lag})
    driver.start()
    try:
        lags = []
        for _ in range(6):
            batch = driver.get_training_exps()
            stamps = batch.experience.policy_version.numpy()
            lags.append(int(version) - stamps.min())
            assert stamps.shape == (2, 3, DRIVER_B)
            time.sleep(0.1)  # a slow learner: the queue fills with old unrolls
            version.assign_add(3)
    finally:
        driver.stop()
    dropped = driver.summaries()["learner/dropped_unrolls"]
    if max_policy_lag is None:
        assert dropped == 0 and max(lags) > 1
    else:
        assert dropped > 0 and max(lags) <= max_policy_lag


def test_replayed_unrolls_are_recent_ones_appended_to_new_ones():
    driver = learning_driver(None, seed=0, bindings={"FreshBatches.replay_proportion": 1.0,
                                                     "FreshBatches.replay_buffer_num_slots": 3})
    assert driver.learn_batch_shape[0] == 4
    driver.start()
    seen = []  # (env, first count) of every new unroll, in arrival order
    replayed = []
    try:
        for _ in range(8):
            batch = driver.get_training_exps()
            key = lambda q: (int(batch.env_ids[q]),
                             int(batch.experience.time_step.observation[q, 0, 0, 2]))
            assert batch.experience.action.shape[0] == 4 and batch.bootstrap.reward.shape[0] == 4
            assert batch.env_steps == 2 * 3 * DRIVER_B  # only new unrolls count as env steps
            seen.extend(key(q) for q in range(2))
            for q in range(2, 4):
                assert key(q) in seen[-3:]  # one of the 3 most recent new unrolls
                replayed.append(key(q))
    finally:
        timed_stop(driver)
    assert len(set(replayed)) > 3  # the ring moves on
