"""`LocalCollection` in a driver: env restarts, policy reads, busy fractions."""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.errors import ThreadError
from fakes import CountingEnv, CountingPolicy, gin_bound, learning_driver, timed_stop

B = 3


def test_restart_failed_envs_replaces_the_env_and_training_goes_on():
    made = []

    def factory(i):
        made.append(CountingEnv(i, B, fail_at=7 if i == 1 else None))
        return made[-1]

    with gin_bound({"LocalCollection.restart_failed_envs": True}):
        driver = AsyncOffPolicyDriver(factory, CountingPolicy(CountingEnv(0, B)), None,
                                      num_envs=2, actor_queue_cap=1, unroll_length=4,
                                      learn_queue_cap=2)
    driver.start()
    try:
        # Ten batches, and on until env 1 (failing in its second unroll) was replaced:
        # the threads share the CPU unevenly, so env 0 may make ten batches alone.
        deadline, batches = time.monotonic() + 60, 0
        while batches < 10 or (driver.summaries()["faults/env_restarts"] < 1 and
                               time.monotonic() < deadline):
            batch = driver.get_training_exps()
            counts = batch.experience.time_step.observation.numpy()[..., 2]
            # No unroll spans a restart: counts stay consecutive.
            np.testing.assert_array_equal(np.diff(counts, axis=1), 1)
            batches += 1
        assert driver.summaries()["faults/env_restarts"] >= 1
    finally:
        timed_stop(driver)
    assert len(made) == 2 + driver.summaries()["faults/env_restarts"]
    assert all(env.closed for env in made)


class _ResetFailingEnv(CountingEnv):
    """Fails in its first reset, as an env whose worker just died does."""

    def _reset(self):
        raise RuntimeError("worker died before the reset")


def test_an_env_failing_in_its_reset_is_replaced_too():
    made = []

    def factory(i):  # env 1: fails at step 7, its replacement at its reset, then fine
        kinds = [lambda: CountingEnv(i, B, fail_at=7), lambda: _ResetFailingEnv(i, B)]
        ones = len([env for env in made if env._env_id == 1])  # pylint: disable=protected-access
        made.append(kinds[ones]() if i == 1 and ones < 2 else CountingEnv(i, B))
        return made[-1]

    with gin_bound({"LocalCollection.restart_failed_envs": True}):
        driver = AsyncOffPolicyDriver(factory, CountingPolicy(CountingEnv(0, B)), None,
                                      num_envs=2, actor_queue_cap=1, unroll_length=4,
                                      learn_queue_cap=2)
    driver.start()
    try:
        for _ in range(10):
            driver.get_training_exps()
        assert driver.summaries()["faults/env_restarts"] == 2
    finally:
        timed_stop(driver)


def test_a_replacement_env_that_fails_while_it_is_made_is_made_again():
    """An env worker killed while its replacement env starts: the factory raises,
    and that is an env error like any other (it used to end the actor process)."""
    made, attempts = [], []

    def factory(i):  # env 1: fails at step 7; its first replacement fails to be made
        attempts.append(i)
        if i == 1 and attempts.count(1) == 2:
            raise ConnectionResetError(104, "Connection reset by peer")
        made.append(CountingEnv(i, B, fail_at=7 if i == 1 and attempts.count(1) == 1
                                else None))
        return made[-1]

    with gin_bound({"LocalCollection.restart_failed_envs": True}):
        driver = AsyncOffPolicyDriver(factory, CountingPolicy(CountingEnv(0, B)), None,
                                      num_envs=2, actor_queue_cap=1, unroll_length=4,
                                      learn_queue_cap=2)
    driver.start()
    try:
        deadline = time.monotonic() + 60
        while attempts.count(1) < 3 and time.monotonic() < deadline:
            driver.get_training_exps()
        for _ in range(10):  # and it goes on, env 1 included
            driver.get_training_exps()
        assert attempts.count(1) == 3
        assert driver.summaries()["faults/env_restarts"] == 2  # the failed making counts
    finally:
        timed_stop(driver)
    assert all(env.closed for env in made)


def test_an_env_failing_past_its_restart_budget_stops_training_with_its_error():
    made = []

    def factory(i):  # env 1 fails at its 7th step, every time it is rebuilt
        made.append(CountingEnv(i, B, fail_at=7 if i == 1 else None))
        return made[-1]

    with gin_bound({"LocalCollection.restart_failed_envs": True,
                    "LocalCollection.max_env_restarts": 2}):
        driver = AsyncOffPolicyDriver(factory, CountingPolicy(CountingEnv(0, B)), None,
                                      num_envs=2, actor_queue_cap=1, unroll_length=4,
                                      learn_queue_cap=2)
    driver.start()
    try:
        with pytest.raises(ThreadError, match="EnvThread1 failed: .*broke at step 7"):
            for _ in range(200):  # bounded: env 1 fails every 2 of its unrolls
                driver.get_training_exps()
    finally:
        timed_stop(driver)
    assert driver.summaries()["faults/env_restarts"] == 2
    assert len([env for env in made if env._env_id == 1]) == 3  # pylint: disable=protected-access


def test_actors_read_the_weights_when_requests_arrive_not_when_they_start_waiting():
    version = tf.Variable(0, dtype=tf.int64)
    driver = learning_driver(version)
    gate = threading.Event()
    for env in driver.collection.envs:
        env.step = lambda action, step=env.step: gate.wait(10) and step(action)
    driver.start()
    time.sleep(0.5)  # the actor is now waiting inside its compiled call
    version.assign(7)
    gate.set()
    try:
        versions = driver.get_training_exps().experience.policy_version.numpy()
    finally:
        timed_stop(driver)
    # Step 0 was requested before the bump; every later request after it.
    assert (versions[:, 1:] == 7).all(), versions[:, :, 0]


@pytest.mark.slow
def test_busy_fractions_point_at_the_slow_stage():
    driver = learning_driver(None)
    for env in driver.collection.envs:  # a slow env: the actor mostly waits for it
        env.step = lambda action, step=env.step: time.sleep(0.005) or step(action)
    driver.start()
    try:
        for _ in range(2):  # every thread has traced and run: start-up is out of the window
            driver.get_training_exps()
        driver.busy_fractions()  # start the window here
        for _ in range(16):
            driver.get_training_exps()
        busy = driver.busy_fractions()
    finally:
        timed_stop(driver)
    assert 0.5 < busy["env_busy"] <= 1.0, busy
    assert 0.0 < busy["actor_busy"] < busy["env_busy"], busy
