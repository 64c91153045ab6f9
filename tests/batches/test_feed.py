"""Tests of `LearnFeed` on a scripted collector and batch source (no threads of ours)."""

import threading
from typing import NamedTuple, Tuple

import pytest
import tensorflow as tf

from alf_async.batches import LearnFeed
from alf_async.errors import LearnerStarvedError, ThreadError, stop_with_error


class _Collector:
    """The parts of a `Collector` a feed uses, over a real coordinator."""

    def __init__(self):
        self.coord = tf.train.Coordinator()
        self.closed = threading.Event()

    def fail(self, error):
        stop_with_error(self.coord, self.closed.set, error)

    def raise_stopped(self):
        self.coord.raise_requested_exception()
        raise RuntimeError("AsyncOffPolicyDriver was stopped")


class _Batch(NamedTuple):
    """The part of a `LearnBatch` a feed touches."""
    name: str
    wants_back: Tuple[str, ...] = ()


class _Source:
    """`next(updates_ahead)` returns the scripted batches, then waits for a stop (None)."""

    wants_back = ("td_error",)

    def __init__(self, collector, batches=()):
        self._collector = collector
        self._batches = list(batches)
        self.asked = []

    def next(self, updates_ahead=0):
        self.asked.append(updates_ahead)
        if self._batches:
            return self._batches.pop(0)
        self._collector.closed.wait(timeout=10)
        return None


def _feed(batches=(), timeout=5.0):
    collector = _Collector()
    source = _Source(collector, batches)
    feed = LearnFeed(collector, source, lambda: "learn queue 0/2", False,
                     learner_queue_timeout=timeout)
    return feed, source, collector


def test_batches_come_from_the_source_with_the_updates_ahead():
    feed, source, _ = _feed([_Batch("b0"), _Batch("b1")])
    assert feed.take() == _Batch("b0", ("td_error",))  # marked with what its source wants
    assert feed.next(updates_ahead=2) == _Batch("b1", ("td_error",))
    assert source.asked == [0, 2]


def test_a_starved_wait_fails_with_the_diagnosis_and_counts_as_seen():
    feed, _, _ = _feed(timeout=0.1)
    with pytest.raises(LearnerStarvedError,
                       match=r"learner_queue_timeout=0.1s: learn queue 0/2"):
        feed.take()
    assert feed.error_seen


def test_an_error_in_next_is_not_seen_until_the_consumer_raises_it():
    feed, _, collector = _feed()
    collector.fail(ThreadError("EnvThread1 failed: boom"))
    with pytest.raises(ThreadError, match="EnvThread1 failed"):
        feed.next(updates_ahead=1)  # the prefetch thread's call
    assert not feed.error_seen
    with pytest.raises(ThreadError, match="EnvThread1 failed"):
        feed.raise_stopped()  # the consumer's, when the prefetch thread gives up
    assert feed.error_seen


def test_a_closed_feed_gives_nothing():
    feed, source, _ = _feed([_Batch("b0")])
    feed.close()
    with pytest.raises(RuntimeError, match="stopped"):
        feed.take()
    assert source.asked == [] and feed.closed


def test_the_learn_queues_depth_is_read_only_where_the_source_learns_from_env():
    """An offline source takes nothing from the learn queue: reading its depth (a TF op)
    at every update cost the dataset's learner a few percent of its updates."""
    collector = _Collector()
    queue = tf.queue.FIFOQueue(4, [tf.int32], shapes=[[]])
    queue.enqueue(1)
    queue.enqueue(2)
    collector.queues = type("Queues", (), {"learn_queue": queue})()
    for learns_from_env, depth in ((True, 2), (False, 0)):
        source = _Source(collector)
        source.learns_from_env = learns_from_env
        feed = LearnFeed(collector, source, lambda: "", False, learner_queue_timeout=1.0)
        assert feed.queue_size() == depth
