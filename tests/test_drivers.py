"""`AsyncOffPolicyDriver`: the composition's guarantees (order, errors, stops, modes)."""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.metrics import tf_metrics
from tf_agents.trajectories import time_step as ts

from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.errors import LearnerStarvedError, ThreadError
from fakes import (EPISODE_LENGTH, CountingEnv, CountingPolicy, gin_bound, leaked_driver_threads,
                   learning_driver, timed_stop)

B = 3


def _driver(num_envs=4, fail_env=None, fail_at=None, **kwargs):
    envs = [CountingEnv(i, B, fail_at=fail_at if i == fail_env else None)
            for i in range(num_envs)]
    kwargs.setdefault("unroll_length", 4)
    kwargs.setdefault("learn_queue_cap", 2)
    kwargs.setdefault("actor_queue_cap", 2)
    driver = AsyncOffPolicyDriver(lambda i: envs[i], CountingPolicy(envs[0]), None,
                                  num_envs=num_envs, **kwargs)
    return driver, envs


@pytest.mark.parametrize("num_actor_queues", [2, 0])  # 0: env threads act themselves
def test_every_env_step_reaches_the_learner_once_in_order(num_actor_queues):
    driver, envs = _driver(num_envs=4, num_actor_queues=num_actor_queues, unroll_length=4,
                           learn_queue_cap=3)
    driver.start()
    seen = {}  # (env, sub-env) -> list of step counts
    try:
        for k in range(1000):  # 12 batches, and until all envs have been seen
            if k >= 12 and len({e for e, _ in seen}) == 4:
                break
            batch = driver.get_training_exps()
            exp = batch.experience
            obs = exp.time_step.observation.numpy()
            assert obs.shape == (3, 4, B, 3)
            assert exp.action.shape == (3, 4, B) and exp.log_prob.shape == (3, 4, B)
            assert batch.bootstrap.observation.shape == (3, B, 3)
            assert batch.env_steps == 3 * 4 * B
            np.testing.assert_array_equal(obs[:, 0, 0, 0], batch.env_ids.numpy())
            counts = obs[..., 2]
            # The policy's reply for each step is stored with that step.
            np.testing.assert_array_equal(exp.action.numpy(), counts.astype(np.int64) % 2)
            np.testing.assert_array_equal(exp.log_prob.numpy(), -counts)
            # Within an unroll counts are consecutive, and the bootstrap follows.
            np.testing.assert_array_equal(np.diff(counts, axis=1), 1)
            np.testing.assert_array_equal(batch.bootstrap.observation.numpy()[..., 2],
                                          counts[:, -1] + 1)
            for q in range(3):
                for b in range(B):
                    seen.setdefault((int(batch.env_ids[q]), b), []).extend(counts[q, :, b])
    finally:
        driver.stop()
    assert {e for e, _ in seen} == set(range(4))
    for steps in seen.values():
        # Unrolls of one env arrive in order, none lost, none repeated.
        np.testing.assert_array_equal(steps, np.arange(len(steps)))
    assert driver.stats.num_env_steps >= sum(len(s) for s in seen.values())


def test_policy_state_is_carried_and_reset_where_episodes_start():
    driver, _ = _driver(num_envs=2, num_actor_queues=1, actor_queue_cap=1, unroll_length=7)
    driver.start()
    try:
        batch = driver.get_training_exps()
    finally:
        driver.stop()
    state = batch.experience.policy_state.numpy()  # state *before* each step
    step_type = batch.experience.time_step.step_type.numpy()
    count = batch.experience.time_step.observation.numpy()[..., 2]
    for q, t, b in np.ndindex(*state.shape):
        # The state counts the steps acted on since the episode's FIRST step.
        assert state[q, t, b] == count[q, t, b] % EPISODE_LENGTH, (q, t, b)
    assert (step_type == ts.StepType.FIRST).any() and state.max() == EPISODE_LENGTH - 1


def test_log_thread_counts_episodes_and_returns():
    driver, _ = _driver(num_envs=2, num_actor_queues=1, unroll_length=10, learn_queue_cap=2)
    driver.start()
    try:
        for _ in range(3):
            driver.get_training_exps()
        deadline = time.time() + 10
        while driver.stats.num_episodes < 6 * B and time.time() < deadline:
            time.sleep(0.01)
    finally:
        driver.stop()
    average_return, average_length = driver.stats.averages()
    # An episode is FIRST + (EPISODE_LENGTH - 1) rewarded steps.
    assert average_return == EPISODE_LENGTH - 1
    assert average_length == EPISODE_LENGTH - 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_actor_queues=2, actor_queue_cap=3), "num_actor_queues \\* actor_queue_cap"),
    (dict(learn_queue_cap=0), "learn_queue_cap must be an integer >= 1, got 0"),
    (dict(unroll_length=0), "unroll_length must be an integer >= 1, got 0"),
    (dict(actor_queue_cap=0), "actor_queue_cap must be an integer >= 1, got 0"),
    (dict(num_actor_queues=1.5), "num_actor_queues must be an integer >= 0, got 1.5"),
])
def test_bad_sizes_are_rejected_before_any_thread(kwargs, message):
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match=message):
        _driver(num_envs=4, **kwargs)
    # No thread started (one of an earlier test may have ended meanwhile).
    assert not set(threading.enumerate()) - before


def test_env_with_wrong_specs_is_rejected():
    policy = CountingPolicy(CountingEnv(0, B))
    with pytest.raises(ValueError, match="env 1 has observation spec"):
        AsyncOffPolicyDriver(lambda i: CountingEnv(i, B, obs_dim=3 + i), policy, None,
                             num_envs=2, actor_queue_cap=1)


def test_envs_with_different_batch_sizes_are_rejected():
    policy = CountingPolicy(CountingEnv(0, B))
    with pytest.raises(ValueError, match="same batch_size"):
        AsyncOffPolicyDriver(lambda i: CountingEnv(i, B + i), policy, None, num_envs=2,
                             actor_queue_cap=1)


def test_stop_is_idempotent_and_works_before_start():
    driver, envs = _driver()
    timed_stop(driver)
    timed_stop(driver)
    assert all(env.closed for env in envs)


def test_stop_is_prompt_with_threads_blocked_on_full_and_empty_queues():
    driver, envs = _driver(num_envs=4, learn_queue_cap=2)
    driver.start()
    deadline = time.time() + 20
    # Nobody consumes: the learn queue fills up, env threads block on it and
    # actor and log threads block on their empty queues.
    while driver.learn_queue_size() < 2 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert driver.learn_queue_size() == 2
    counts = [env.count for env in envs]
    time.sleep(0.2)
    assert [env.count for env in envs] == counts, "env threads should be blocked"
    timed_stop(driver)
    assert all(env.closed for env in envs)


class _StuckEnv(CountingEnv):
    """Blocks in its 5th step until `gate` opens: nothing a stop does can wake it."""

    def __init__(self, env_id, gate):
        super().__init__(env_id, B)
        self.gate = gate

    def _step(self, action):
        if self.count == 4:
            self.gate.wait(30)
        return super()._step(action)


def test_a_thread_that_outlives_the_stop_is_named_with_where_it_is(caplog, monkeypatch):
    monkeypatch.setattr(AsyncOffPolicyDriver, "STOP_GRACE_SECS", 0.3)
    gate = threading.Event()
    envs = [CountingEnv(0, B), _StuckEnv(1, gate)]
    driver = AsyncOffPolicyDriver(lambda i: envs[i], CountingPolicy(envs[0]), None,
                                  num_envs=2, num_actor_queues=0, unroll_length=8,
                                  learn_queue_cap=2)
    driver.start()
    try:
        deadline = time.time() + 20
        while envs[1].count < 4 and time.time() < deadline:
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="still running: EnvThread1"):
            driver.stop()
        report = [r.getMessage() for r in caplog.records if "after the stop" in r.getMessage()]
        assert report and report[0].startswith("EnvThread1 still running 0.3 s after the stop")
        assert "in _step\n    self.gate.wait(30)" in report[0]  # the env's own line
    finally:
        gate.set()
        for thread in leaked_driver_threads():
            thread.join(10)
    assert not leaked_driver_threads()


def test_env_error_surfaces_from_get_training_exps_with_thread_name():
    driver, _ = _driver(num_envs=4, fail_env=1, fail_at=6)
    driver.start()
    start = time.time()
    with pytest.raises(ThreadError, match="EnvThread1 failed: RuntimeError: env 1 broke at step 6"):
        for _ in range(100):
            driver.get_training_exps()
    assert time.time() - start < 10
    timed_stop(driver)  # does not raise the same error twice


def test_env_error_is_reraised_by_stop():
    driver, _ = _driver(num_envs=2, actor_queue_cap=1, fail_env=0, fail_at=3)
    driver.start()
    deadline = time.time() + 10
    while not driver._collector.coord.should_stop() and time.time() < deadline:
        time.sleep(0.01)
    with pytest.raises(ThreadError, match="EnvThread0 failed") as info:
        driver.stop()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert not leaked_driver_threads()


def test_policy_error_names_the_actor_thread():
    env = CountingEnv(0, B)
    policy = CountingPolicy(env)

    def broken_act(observation, step_type, policy_state, env_id=None):
        raise tf.errors.InvalidArgumentError(None, None, "bad policy")

    policy.act = broken_act
    driver = AsyncOffPolicyDriver(lambda i: CountingEnv(i, B), policy, None, num_envs=2,
                                  actor_queue_cap=1)
    with pytest.raises(ThreadError, match="ActorThread0 failed: InvalidArgumentError"):
        driver.start()
    assert not leaked_driver_threads()
    timed_stop(driver)


def test_starving_learner_gets_a_diagnosis_instead_of_a_hang():
    with gin_bound({"LearnFeed.learner_queue_timeout": 0.5}):
        driver, envs = _driver(num_envs=2, actor_queue_cap=1, unroll_length=4,
                               learn_queue_cap=2)
    driver.start()
    deadline = time.time() + 60  # the first batch compiles: slow on a loaded machine
    while driver.learn_queue_size() < 2 and time.time() < deadline:
        time.sleep(0.05)
    driver.get_training_exps()
    gate = threading.Event()
    for env in envs:  # freeze the envs: no unroll is produced until the gate opens
        step = env.step
        env.step = lambda action, step=step: gate.wait(10) and step(action)
    start = time.time()
    with pytest.raises(LearnerStarvedError, match=r"learner_queue_timeout=0.5s: 2/2 env threads "
                       r"and 1/1 actor threads alive, actor queue sizes \[\d\], \d+ unrolls"):
        for _ in range(10):
            driver.get_training_exps()
    assert time.time() - start < 5
    gate.set()
    timed_stop(driver)


def test_deterministic_mode_runs_envs_only_for_the_batch_asked_for_in_env_order():
    version = tf.Variable(0, dtype=tf.int64)
    driver = learning_driver(version, deterministic=True, seed=3, learn_queue_cap=4,
                              num_actor_queues=2)
    driver.start()
    try:
        for k in range(3):
            batch = driver.get_training_exps()
            counts = batch.experience.time_step.observation.numpy()[..., 2]
            # Q / E = 2 consecutive unrolls of env 0, then 2 of env 1.
            np.testing.assert_array_equal(batch.env_ids.numpy(), [0, 0, 1, 1])
            np.testing.assert_array_equal(counts[:, 0, 0], [6 * k, 6 * k + 3] * 2)
            assert (batch.experience.policy_version.numpy() == k).all()
            time.sleep(0.2)  # a slow update: nothing is collected meanwhile
            assert driver.learn_queue_size() == 0
            assert [env.count for env in driver.collection.envs] == [6 * (k + 1)] * 2
            version.assign_add(1)
    finally:
        timed_stop(driver)


@pytest.mark.parametrize("kwargs, message", [
    (dict(deterministic=True), "needs a seed"),
    (dict(deterministic=True, seed=1, learn_queue_cap=3), "got 3 and 2"),
    (dict(deterministic=True, seed=1, num_actor_queues=0), "needs actor threads"),
    (dict(num_actor_queues=-1), "num_actor_queues must be an integer >= 0, got -1"),
    (dict(bindings={"FreshBatches.replay_proportion": 0.7}), "whole number"),
    (dict(bindings={"FreshBatches.replay_proportion": 1.0}),
     "replay_buffer_num_slots must be >= 1"),
])
def test_impossible_deterministic_or_replay_settings_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        learning_driver(None, **kwargs)
    assert not leaked_driver_threads()


def test_get_training_exps_after_stop_raises_even_with_a_full_learn_queue():
    driver, _ = _driver(num_envs=4, learn_queue_cap=2)
    driver.start()
    deadline = time.time() + 20
    while driver.learn_queue_size() < 2 and time.time() < deadline:
        time.sleep(0.01)
    timed_stop(driver)
    assert driver.learn_queue_size() == 2  # a whole batch is still queued
    with pytest.raises(RuntimeError, match="AsyncOffPolicyDriver was stopped"):
        driver.get_training_exps()


# --- observers and metrics ------------------------------------------------------------


def test_observers_see_every_unroll_and_metrics_agree_with_the_driver_statistics():
    seen = []  # (env, first step count, shape) of every trajectory an observer got
    observer = lambda traj: seen.append((int(traj.observation[0, 0, 0]),
                                         int(traj.observation[0, 0, 2]), traj.reward.shape))
    metrics = [tf_metrics.AverageReturnMetric(batch_size=6),
               tf_metrics.NumberOfEpisodes(), tf_metrics.EnvironmentSteps()]
    driver = learning_driver(None, observers=[observer, *metrics])  # as tf-agents drivers
    driver.start()
    try:
        for _ in range(10):
            driver.get_training_exps()
    finally:
        timed_stop(driver)
    steps, episodes = driver.stats.num_env_steps, driver.stats.num_episodes
    assert len(seen) * 3 * 3 == steps and all(shape == (3, 3) for _, _, shape in seen)
    for env in (0, 1):  # each env's unrolls in order, none torn or repeated
        firsts = [first for e, first, _ in seen if e == env]
        assert firsts == list(range(0, 3 * len(firsts), 3))
    # Every CartPole-free CountingEnv episode returns EPISODE_LENGTH - 1.
    assert driver.stats.averages()[0] == metrics[0].result().numpy() == EPISODE_LENGTH - 1
    # tf-agents counts an episode at its last transition, into the LAST step; the stats
    # at the LAST step itself, which may be in the unroll after: at most one per sub-env.
    assert episodes > 0 and 0 <= int(metrics[1].result()) - episodes <= 6
    # tf-agents' EnvironmentSteps skips boundary steps (out of LAST): step counts 4, 9,
    # ... of each sub-env, which has stepped T = 3 times per unroll of its env.
    counts = [3 * sum(e == env for e, _, _ in seen) for env in (0, 1)]
    boundaries = sum(3 * (count // EPISODE_LENGTH) for count in counts)
    assert int(metrics[2].result()) == steps - boundaries
