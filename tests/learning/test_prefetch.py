import threading
import time

import pytest
import tensorflow as tf

from alf_async.errors import ThreadError
from alf_async.experience import LearnBatch
from alf_async.learning.learner import DeviceBatch, Update
from alf_async.learning.prefetch import LearnerLoop
from fakes import leaked_driver_threads, learning_driver, timed_stop

B = 3


class _RecordingLearner:
    """Logs when batches are placed and updates run; an update takes `update_secs`."""

    def __init__(self, update_secs=0.2):
        self.train_step = tf.Variable(0, dtype=tf.int64)
        self.placed, self.updates = [], []
        self._update_secs = update_secs

    def place(self, batch):
        self.placed.append(time.perf_counter())
        return DeviceBatch(batch.experience, batch.bootstrap, (),
                           batch.experience.policy_version, batch.env_steps, batch.items)

    def update(self, batch, clock=None):
        start = time.perf_counter()
        time.sleep(self._update_secs)
        self.train_step.assign_add(1)
        self.updates.append((start, time.perf_counter()))
        return Update({}, {"td_error": batch.items})


def _loop(learner, prefetch_depth=1, **kwargs):
    driver = learning_driver(learner.train_step, **kwargs)
    loop = LearnerLoop(learner, driver.feed, prefetch_depth=prefetch_depth)
    driver.attach(loop)
    return loop, driver


@pytest.mark.parametrize("prefetch_depth", [0, 1, 2])
def test_next_batch_is_placed_while_the_learner_trains(prefetch_depth):
    learner = _RecordingLearner()
    loop, driver = _loop(learner, prefetch_depth)
    driver.start()
    try:
        steps = [driver.run_async() for _ in range(4)]  # ALF's name for loop.step()
    finally:
        timed_stop(driver)
    assert steps == [2 * 3 * B] * 4
    for k, (_, end) in enumerate(learner.updates[:-1]):
        placed_before_end = sum(t < end for t in learner.placed)
        if prefetch_depth:  # batch k + 1 was ready before update k ended
            assert k + 2 <= placed_before_end <= k + 2 + prefetch_depth
        else:
            assert placed_before_end == k + 1
    assert {"dequeue_wait_ms", "load_ms"} <= set(loop.clock.read_and_reset())


def test_thread_error_reaches_run_async_through_the_prefetch_thread():
    loop, driver = _loop(_RecordingLearner(update_secs=0.0), fail_env=1)
    driver.start()
    with pytest.raises(ThreadError, match="EnvThread1 failed: RuntimeError: env 1 broke"):
        for _ in range(100):
            loop.step()
    timed_stop(driver)  # does not raise the same error again


def test_stop_from_another_thread_ends_a_waiting_step():
    loop, driver = _loop(_RecordingLearner(update_secs=0.0))
    driver.start()
    loop.step()
    for env in driver.collection.envs:
        env.step = lambda action, step=env.step: time.sleep(0.05) or step(action)
    stopper = threading.Timer(0.5, driver.stop)
    stopper.start()
    start = time.time()
    with pytest.raises(RuntimeError, match="stopped"):
        for _ in range(100):
            loop.step()
    assert time.time() - start < 3
    stopper.join()
    assert not leaked_driver_threads()


def test_deterministic_drivers_are_not_prefetched_and_bad_depths_are_rejected():
    loop, driver = _loop(_RecordingLearner(), prefetch_depth=2, deterministic=True, seed=1)
    assert loop.prefetch_depth == 0
    driver.stop()
    with pytest.raises(ValueError, match="LearnerLoop.prefetch_depth must be an integer >= 0"):
        _loop(_RecordingLearner(), prefetch_depth=-1)


def test_run_async_without_a_learner_loop_is_an_error():
    driver = learning_driver(None)
    with pytest.raises(RuntimeError, match="needs a LearnerLoop"):
        driver.run_async()
    driver.stop()


class _ItemFeed:
    """A feed of batches whose `items` number them; records what comes back."""

    prefetch_allowed = True

    def __init__(self):
        self.taken, self.back = 0, []

    def take(self):
        self.taken += 1
        return LearnBatch((), (), None, 1, items=self.taken)

    @staticmethod
    def queue_size():
        return 0

    def after_update(self, batch, per_item):
        self.back.append((batch.items, per_item["td_error"], self.taken))


def test_each_update_hands_its_batch_and_per_item_terms_back_once_in_order():
    learner = _RecordingLearner(update_secs=0.0)
    learner.place = lambda batch: DeviceBatch((), (), (), None, 1, batch.items)
    feed = _ItemFeed()
    loop = LearnerLoop(learner, feed, prefetch_depth=0)
    for _ in range(3):
        loop.step()
    # Batch k came back with the update's terms for batch k, before batch k + 1 was taken.
    assert feed.back == [(1, 1, 1), (2, 2, 2), (3, 3, 3)]
    assert "after_update_ms" in loop.clock.read_and_reset()
