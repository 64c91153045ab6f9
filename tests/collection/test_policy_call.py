"""`PolicyCall`: every reply is stamped with the policy version that acted."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from alf_async.collection import Collector
from alf_async.drivers import AsyncOffPolicyDriver, DriverSizes, local_collection
from fakes import CountingEnv, VersionPolicy, counters_of, timed_stop

B = 3


@pytest.mark.parametrize("num_envs", [2, 4])
@pytest.mark.parametrize("num_actor_queues", [0, 1, 2])
def test_stamps_are_the_version_that_acted_and_never_decrease(num_envs, num_actor_queues):
    version = tf.Variable(0, dtype=tf.int64)
    envs = [CountingEnv(i, B) for i in range(num_envs)]
    driver = AsyncOffPolicyDriver(lambda i: envs[i], VersionPolicy(envs[0], version),
                                  counters_of(version),
                                  num_envs=num_envs, num_actor_queues=num_actor_queues,
                                  actor_queue_cap=1, unroll_length=8, learn_queue_cap=2)
    bumping = threading.Event()

    def learner():  # a learner that finishes an update every millisecond
        while not bumping.wait(0.001):
            version.assign_add(1)

    bumper = threading.Thread(target=learner, daemon=True)
    driver.start()
    bumper.start()
    last = {}  # env -> stamp of its latest step seen
    try:
        for _ in range(60):
            batch = driver.get_training_exps()
            now = int(version)
            stamps = batch.experience.policy_version.numpy()  # [Q, T, B]
            # The action is the version the policy read: the stamp must be it.
            np.testing.assert_array_equal(batch.experience.action.numpy(), stamps)
            assert stamps.max() <= now
            for q, env in enumerate(batch.env_ids.numpy()):
                per_step = stamps[q, :, 0]
                assert (np.diff(per_step) >= 0).all(), per_step
                assert per_step[0] >= last.get(env, 0), (last.get(env), per_step)
                last[env] = per_step[-1]
    finally:
        bumping.set()
        bumper.join(5)
        timed_stop(driver)
    assert len(last) == num_envs and max(last.values()) > 20  # the learner did move


class _EnvIdPolicy(VersionPolicy):
    """Acts with the global env id it is told for each row."""

    def act(self, observation, step_type, policy_state, seed=None, env_id=None):
        _, state, log_prob = super().act(observation, step_type, policy_state, seed)
        assert env_id.dtype == tf.int32  # as the contract says
        return tf.cast(env_id, tf.int64), state, log_prob


@pytest.mark.parametrize("num_actor_queues", [0, 1])
def test_the_policy_is_told_each_rows_global_env_id(num_actor_queues):
    version = tf.Variable(0, dtype=tf.int64)
    envs = [CountingEnv(i, B) for i in range(2)]
    # As actor process 3 of E = 2 envs (the actor's own builder): global env ids 6 and 7.
    sizes = DriverSizes(num_envs=2, num_actor_queues=num_actor_queues, unroll_length=4,
                        learn_queue_cap=4, actor_queue_cap=1)
    collection = local_collection(lambda i: envs[i], _EnvIdPolicy(envs[0], version), version,
                                  sizes, task=3)
    collector = Collector(collection, learn_queue_cap=2)
    collector.start([])
    try:
        unrolls = collector.take(4)
    finally:
        collector.stop(2.0)
        collection.close()
    action = unrolls.experience.action.numpy()  # [4, T, B]
    env_id = unrolls.env_id.numpy()  # local ids 0, 1
    np.testing.assert_array_equal(action, np.broadcast_to((env_id + 6)[:, None, None],
                                                          action.shape))
