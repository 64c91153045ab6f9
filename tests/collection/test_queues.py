import collections
import threading

import numpy as np
import pytest
import tensorflow as tf

from alf_async.collection.queues import NestFIFOQueue, TFQueues

Pair = collections.namedtuple("Pair", ["a", "b"])


def _spec():
    return Pair(a=tf.TensorSpec([2], tf.float32),
                b={"x": tf.TensorSpec([], tf.int64), "empty": (), "y": (tf.TensorSpec([3], tf.int32),)})


def _element(i):
    return Pair(a=np.full([2], i, np.float32),
                b={"x": np.int64(i), "empty": (), "y": (np.arange(3, dtype=np.int32) + i,)})


def test_round_trip_keeps_nest_and_values():
    q = NestFIFOQueue(4, _spec())
    q.enqueue(_element(7))
    out = q.dequeue()
    assert isinstance(out, Pair) and out.b["empty"] == ()
    np.testing.assert_array_equal(out.a, [7, 7])
    assert int(out.b["x"]) == 7
    np.testing.assert_array_equal(out.b["y"][0], [7, 8, 9])


def test_single_leaf_nest():
    q = NestFIFOQueue(2, tf.TensorSpec([2], tf.int32))
    q.enqueue(np.array([1, 2], np.int32))
    out = q.dequeue()
    assert isinstance(out, tf.Tensor)
    np.testing.assert_array_equal(out, [1, 2])


def test_spec_without_leaves_is_rejected():
    with pytest.raises(ValueError, match="at least one tensor"):
        NestFIFOQueue(2, {"a": ()})


def test_dequeue_many_and_all_stack_in_fifo_order():
    q = NestFIFOQueue(3, _spec())
    for i in range(3):
        q.enqueue(_element(i))
    assert q.size() == 3
    two = q.dequeue_many(2)
    np.testing.assert_array_equal(two.b["x"], [0, 1])
    q.enqueue(_element(3))
    q.enqueue(_element(4))
    everything = q.dequeue_all()
    assert everything.a.shape == (3, 2)
    assert everything.b["y"][0].shape == (3, 3)
    np.testing.assert_array_equal(everything.b["x"], [2, 3, 4])
    assert q.size() == 0


def test_close_wakes_blocked_consumer_and_producer():
    empty = NestFIFOQueue(1, _spec())
    full = NestFIFOQueue(1, _spec())
    full.enqueue(_element(0))
    errors = []

    def wait(fn):
        try:
            fn()
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError) as e:
            errors.append(type(e))

    threads = [threading.Thread(target=wait, args=(empty.dequeue,)),
               threading.Thread(target=wait, args=(lambda: full.enqueue(_element(1)),))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(0.3)
        assert t.is_alive(), "the queue op should block before close()"
    empty.close()
    full.close()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert sorted(e.__name__ for e in errors) == ["CancelledError", "OutOfRangeError"]


def test_tfqueues_layout_and_close_all():
    spec = tf.TensorSpec([], tf.int32)
    queues = TFQueues(num_envs=5, num_actor_queues=2, actor_queue_cap=2, learn_queue_cap=3,
                      request_spec=spec, reply_spec=spec, unroll_spec=spec, log_spec=spec)
    assert len(queues.actor_queues) == 2 and queues.actor_queues[0].capacity == 2
    assert len(queues.action_return_queues) == 5
    assert queues.learn_queue.capacity == 3
    queues.close_all()
    queues.close_all()  # idempotent
    for q in queues.all_queues():
        with pytest.raises(tf.errors.OutOfRangeError):
            q.dequeue()
