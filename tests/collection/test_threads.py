"""The threads on their own: queues, a coordinator and fakes; no driver."""

import os
import subprocess
import sys
import threading
import time
import types
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from alf_async.errors import QUEUE_CLOSED, ThreadError
from alf_async.experience import ActReply, ActRequest, LogRecord, make_specs
from alf_async.learning.prefetch import PrefetchThread
from alf_async.metrics import EpisodeStats
from alf_async.collection.queues import TFQueues
from alf_async.collection import DriverThread, EnvThread, LogThread, collector
from alf_async.collection.driver_thread import live_driver_threads
from fakes import EPISODE_LENGTH, CountingEnv, CountingPolicy, leaked_driver_threads

B, T = 3, 4
HERE = os.path.dirname(os.path.abspath(__file__))
TESTS_DIR = os.path.dirname(HERE)  # fakes.py


def _queues(env, policy, num_envs=1, num_actor_queues=0):
    specs = make_specs(policy.time_step_spec, policy.action_spec, policy.policy_state_spec, B, T)
    return TFQueues(num_envs, num_actor_queues, 1, 2, *specs)


def _act(policy):
    def act(request):
        action, state, log_prob = policy.act(request.observation, request.step_type,
                                             request.policy_state)
        return ActReply(action, state, log_prob, tf.zeros([B], tf.int64))
    return act


def _stop(coord, queues, threads):
    coord.request_stop()
    queues.close_all()
    coord.join(threads, stop_grace_period_secs=2)
    assert not leaked_driver_threads()


def test_env_thread_acting_itself_produces_consecutive_unrolls_and_log_records():
    env = CountingEnv(0, B)
    policy = CountingPolicy(env)
    queues, coord = _queues(env, policy), tf.train.Coordinator()
    thread = EnvThread("EnvThread0", coord, queues, env, 0, T, np.zeros(B, np.int32),
                       act_fn=_act(policy))
    thread.prepare()
    thread.start()
    try:
        unrolls = [queues.learn_queue.dequeue() for _ in range(3)]
        # The third unroll is counted once its log record is out too: the two enqueues
        # of one unroll are not ordered, and stopping closes the log queue.
        records = [queues.log_queue.dequeue() for _ in range(3)]
    finally:
        _stop(coord, queues, [thread])
    counts = np.concatenate([u.experience.time_step.observation.numpy()[:, 0, 2]
                             for u in unrolls])
    np.testing.assert_array_equal(counts, np.arange(3 * T))
    np.testing.assert_array_equal(unrolls[0].bootstrap.observation.numpy()[:, 2], T)
    state = unrolls[1].experience.policy_state.numpy()[:, 0]  # before each step
    np.testing.assert_array_equal(state, np.arange(T, 2 * T) % EPISODE_LENGTH)
    assert records[0].reward.shape == (T, B) and thread.num_unrolls >= 3


_STOP_WHILE_A_REQUEST_WAITS = """
import sys, time
import numpy as np, tensorflow as tf
sys.path[:0] = [{tests!r}, {here!r}]
from alf_async.experience import ActRequest
from alf_async.collection.threads import EnvThread
from fakes import CountingEnv, CountingPolicy
from test_threads import B, T, _queues, _stop
env = CountingEnv(0, B)
policy = CountingPolicy(env)
queues, coord = _queues(env, policy, num_actor_queues=1), tf.train.Coordinator()
actor_queue = queues.actor_queues[0]
first = env.reset()
for _ in range(actor_queue.capacity):  # full: the thread's request has to wait
    actor_queue.enqueue(ActRequest(first.observation, first.step_type,
                                   np.zeros(B, np.int32), tf.constant(0)))
thread = EnvThread("EnvThread0", coord, queues, env, 0, T, np.zeros(B, np.int32),
                   actor_queue=actor_queue)
thread.prepare()
thread.start()
time.sleep(0.5)  # the unroll runs, its request waiting for room
_stop(coord, queues, [thread])  # closes the actor queue before the reply queue
print("unrolls", thread.num_unrolls)
"""


@pytest.mark.slow
def test_a_stop_while_an_env_thread_waits_to_send_its_request_cancels_no_reply_wait():
    # In a process of its own: TensorFlow's C++ warnings show there as in a run.
    done = subprocess.run(
        [sys.executable, "-c", _STOP_WHILE_A_REQUEST_WAITS.format(tests=TESTS_DIR, here=HERE)],
        capture_output=True, text=True, timeout=120, check=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1"))
    assert done.stdout.split() == ["unrolls", "0"]
    # The reply is awaited only once the request is in: nothing waits on the open reply
    # queue when the stop fails the request (TensorFlow warned of a cancelled dequeue).
    assert "Skipping cancelled dequeue" not in done.stderr


def test_log_thread_feeds_episode_stats():
    env = CountingEnv(0, B)
    policy = CountingPolicy(env)
    queues, coord = _queues(env, policy), tf.train.Coordinator()
    stats = EpisodeStats(1, B)
    thread = LogThread("LogThread", coord, queues, stats)
    thread.start()
    step_type = np.tile([[0], [1], [1], [1], [2]], (1, B)).astype(np.int32)[:T]
    last = np.array([[2] * B], np.int32)
    reward = np.ones((T, B), np.float32)
    try:
        queues.log_queue.enqueue(LogRecord(reward, step_type, np.int32(0)))
        queues.log_queue.enqueue(LogRecord(reward, np.concatenate([last, step_type[1:]]),
                                           np.int32(0)))
        deadline = time.time() + 10
        while stats.num_episodes < B and time.time() < deadline:
            time.sleep(0.01)
    finally:
        _stop(coord, queues, [thread])
    assert stats.num_episodes == B
    assert stats.averages() == (T, T)  # 3 MID steps + the LAST one, reward 1 each


class _Broken(DriverThread):
    def _step(self):
        raise KeyError("boom")


def test_a_failing_thread_names_itself_and_wakes_blocked_threads():
    env = CountingEnv(0, B)
    queues, coord = _queues(env, CountingPolicy(env)), tf.train.Coordinator()
    woken = []

    def blocked():
        try:
            queues.learn_queue.dequeue()
        except QUEUE_CLOSED:
            woken.append(True)

    waiter = threading.Thread(target=blocked)
    waiter.start()
    thread = _Broken("Broken7", coord, queues.close_all)
    thread.start()
    thread.join(5)
    waiter.join(5)
    assert woken == [True] and coord.should_stop()
    with pytest.raises(ThreadError, match="Broken7 failed: KeyError: 'boom'"):
        coord.raise_requested_exception()


def test_live_driver_threads_sees_every_kind_including_prefetch():
    coord = tf.train.Coordinator()
    gate = threading.Event()
    prefetch = PrefetchThread("PrefetchThread", coord, lambda: None,
                              lambda: gate.wait(5) or 1, lambda b: b, 1, lambda s: None)
    prefetch.start()
    try:
        assert prefetch in live_driver_threads()
        assert all(isinstance(t, DriverThread) for t in live_driver_threads())
    finally:
        coord.request_stop()
        gate.set()
        coord.join([prefetch], stop_grace_period_secs=2)
    assert prefetch not in live_driver_threads()


def test_a_log_thread_with_a_recorder_alone_builds_no_trajectory():
    """The recorder takes the numpy unroll as it is: turning it into a tf-agents
    trajectory, which only observers and metrics read, cost recording half its time."""
    from dataset_fakes import episode, unrolls  # pylint: disable=import-outside-toplevel
    unroll = next(unrolls([episode(4, True, 1)], unroll_length=4))
    unroll = tf.nest.map_structure(tf.constant, unroll._replace(bootstrap=()))
    recorded = []
    recorder = types.SimpleNamespace(add=recorded.append)
    queues = types.SimpleNamespace(logs_unrolls=True, close_all=lambda: None,
                                   log_queue=types.SimpleNamespace(dequeue=lambda: unroll))
    stats = EpisodeStats(1, 1)
    thread = LogThread("LogThread", tf.train.Coordinator(), queues, stats, recorder=recorder)
    with mock.patch.object(collector, "unroll_trajectory", side_effect=AssertionError):
        thread._step()  # pylint: disable=protected-access
    assert len(recorded) == 1 and stats.num_episodes == 1
    with mock.patch.object(collector, "unroll_trajectory", side_effect=AssertionError):
        observed = LogThread("LogThread", tf.train.Coordinator(), queues, stats,
                             observers=[lambda trajectory: None])
        with pytest.raises(AssertionError):
            observed._step()  # pylint: disable=protected-access
