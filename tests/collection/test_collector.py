"""A `Collector` of a `LocalCollection`, alone (as an actor process runs it)."""

import time

import numpy as np
import pytest
import tensorflow as tf

from alf_async.collection import Collector, LocalCollection
from alf_async.errors import ThreadError
from fakes import CountingEnv, CountingPolicy, leaked_driver_threads

B, T = 2, 4


def _collector(num_actor_queues=1, fail_at=None, version=None):
    envs = [CountingEnv(i, B, fail_at=fail_at if i == 1 else None) for i in range(2)]
    version = version if version is not None else tf.Variable(5, dtype=tf.int64)
    collection = LocalCollection(lambda i: envs[i], CountingPolicy(envs[0]), version,
                                 num_envs=2, num_actor_queues=num_actor_queues,
                                 actor_queue_cap=1, unroll_length=T)
    return Collector(collection, learn_queue_cap=1), envs


def _stop(collector):
    start = time.time()
    try:
        collector.stop(grace_secs=1.5)
    finally:
        collector.collection.close()
    assert time.time() - start < 3 and not leaked_driver_threads()


@pytest.mark.parametrize("num_actor_queues", [1, 0])
def test_unrolls_arrive_one_at_a_time_whole_and_stamped(num_actor_queues):
    collector, envs = _collector(num_actor_queues)
    collector.start()
    seen = {0: [], 1: []}
    try:
        for _ in range(8):
            unroll = collector.take(1)
            counts = unroll.experience.time_step.observation.numpy()[0, :, :, 2]  # [T, B]
            assert counts.shape == (T, B)
            np.testing.assert_array_equal(np.diff(counts, axis=0), 1)
            assert (unroll.experience.policy_version.numpy() == 5).all()
            seen[int(unroll.env_id[0])].append(int(counts[0, 0]))
    finally:
        _stop(collector)
    for firsts in seen.values():  # each env's unrolls in order, none lost
        assert firsts == list(range(0, T * len(firsts), T))
    assert collector.stats.num_env_steps >= 8 * T * B - 2 * T * B  # the log thread kept up
    assert all(env.closed for env in envs)
    assert set(collector.compile_seconds) >= {"EnvThread0", "EnvThread1", "LogThread"}


def test_a_failing_env_reaches_take_as_a_thread_error_naming_it():
    collector, envs = _collector(fail_at=6)
    collector.start()
    try:
        # a count of takes is no bound: on a loaded machine env 0 may hand in many
        # unrolls before env 1's thread runs the 6 steps to its failure; time is
        deadline = time.time() + 60
        with pytest.raises(ThreadError, match="EnvThread1 failed: RuntimeError: env 1 broke"):
            while time.time() < deadline:
                collector.take(1)
    finally:
        with pytest.raises(ThreadError):  # stop() re-raises unless told it was seen
            collector.stop(grace_secs=1.5)
        collector.collection.close()
    assert not leaked_driver_threads() and all(env.closed for env in envs)


def test_stop_before_start_closes_the_envs():
    collector, envs = _collector()
    _stop(collector)
    assert all(env.closed for env in envs)
    with pytest.raises(RuntimeError, match="stopped"):
        collector.take(1)
