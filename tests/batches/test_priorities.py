"""`Priorities`: importance weights, R2D2's item priority, the beta schedule, settings;
`PriorityUpdates` and `PriorityWriterThread`: the learner's updates written off its
thread, batched, in order, and all of them before a save (a scripted table)."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches.priorities import Priorities, PriorityUpdates, PriorityWriterThread
from alf_async.errors import ThreadError


def _priorities(**kwargs):
    settings = dict(alpha=0.6, beta=[(0, 0.4), (1000, 1.0)], eps=1e-6, eta=0.9)
    return Priorities(**dict(settings, **kwargs))


def test_weights_are_n_p_to_the_minus_beta_over_the_batch_max():
    priorities = _priorities()
    probability = np.array([0.5, 0.1, 0.01, 0.1])
    table_size = np.array([20, 20, 25, 25])
    weights = priorities.weights(probability, table_size, env_steps=500)  # beta 0.7
    raw = (table_size * probability) ** -0.7
    np.testing.assert_allclose(weights, raw / raw.max(), rtol=1e-6)
    assert weights.dtype == np.float32 and weights.max() == 1.0
    # Beta anneals to 1 and stays there; at 1 the weights are 1 / (N P) normalised.
    assert priorities.beta(0) == pytest.approx(0.4) and priorities.beta(10**6) == 1.0
    full = priorities.weights(probability, table_size, env_steps=10**6)
    np.testing.assert_allclose(full, (1 / (table_size * probability)) * 0.25, rtol=1e-6)


def test_an_items_priority_mixes_max_and_mean_of_its_masked_errors():
    priorities = _priorities(eta=0.9, eps=0.01)
    errors = np.array([[1.0, -3.0, 2.0, 100.0],   # the 100 is masked out
                       [0.5, 0.5, 0.5, 0.5]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
    mixed = priorities.item_priorities(errors, mask)
    np.testing.assert_allclose(mixed, [0.9 * 3 + 0.1 * 2 + 0.01, 0.5 + 0.01], rtol=1e-6)
    # New items enter at the largest priority written so far.
    assert priorities.new_item_priority() == pytest.approx(2.91)
    assert _priorities(new_items="one").new_item_priority() == 1.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(alpha=-0.1), "priority_replay_alpha must be >= 0, got -0.1"),
    (dict(beta=1.5), r"priority_replay_beta must be in \[0, 1\], got 1.5"),
    (dict(beta=[(0, 0.4), (100, 1.2)]), r"priority_replay_beta must be in \[0, 1\], got 1.2"),
    (dict(beta=-0.2), r"priority_replay_beta must be in \[0, 1\], got -0.2"),
    (dict(eta=1.1), r"priority_replay_eta must be in \[0, 1\], got 1.1"),
    (dict(eta=-0.5), r"priority_replay_eta must be in \[0, 1\], got -0.5"),
    (dict(eps=0.0), "priority_replay_eps must be > 0, got 0.0"),
    (dict(alpha="high"), "priority_replay_alpha must be >= 0, got 'high'"),
    (dict(new_items="computed"),
     "new_items must be one of 'max', 'one', 'td_error', got 'computed'"),
])
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=f"PrioritizedReplayBatches.{message}"):
        _priorities(**kwargs)


WAIT = 10.0  # bound of every wait on another thread


class _Table:
    """Records each `mutate(keys, priorities)` as a dict; with `hold`, the first
    write waits for `release` (a slow table)."""

    def __init__(self, hold=False, error=None):
        self.writes = []
        self.entered, self.release = threading.Event(), threading.Event()
        self._hold, self._error = hold, error
        if not hold:
            self.release.set()

    def mutate(self, keys, priorities):
        assert keys.dtype == np.uint64 and priorities.dtype == np.float64
        self.entered.set()
        assert self.release.wait(WAIT)
        if self._error:
            raise self._error
        self.writes.append(dict(zip(keys.tolist(), priorities.tolist())))


def _updates(table):
    # Per-item terms are the priorities themselves here; the mix is Priorities' (tested there).
    return PriorityUpdates(lambda per_item, num_items: per_item[:num_items], table.mutate)


def test_pending_updates_go_in_one_write_where_a_later_update_of_an_item_wins():
    table = _Table()
    updates = _updates(table)
    updates.put(np.array([1, 2], np.uint64), np.array([1.0, 2.0]))
    updates.put(np.array([2, 3], np.uint64), np.array([5.0, 6.0]))
    assert table.writes == []  # nothing written by put()
    updates.write()
    assert table.writes == [{1: 1.0, 2: 5.0, 3: 6.0}]
    assert updates.written_items == 4
    updates.write()  # nothing pending: no table call
    assert len(table.writes) == 1


def test_put_does_not_wait_for_a_slow_write_and_write_waits_for_it():
    table = _Table(hold=True)
    updates = _updates(table)
    updates.put(np.array([1], np.uint64), np.array([1.0]))
    first = threading.Thread(target=updates.write, daemon=True)
    first.start()
    assert table.entered.wait(WAIT)  # the first write is in the table, held there
    put_done = threading.Event()
    threading.Thread(target=lambda: (updates.put(np.array([1, 2], np.uint64),
                                                 np.array([7.0, 8.0])), put_done.set()),
                     daemon=True).start()
    assert put_done.wait(WAIT)  # the learner's hand-over returns while the write is held
    second = threading.Thread(target=updates.write, daemon=True)
    second.start()
    second.join(0.2)
    assert second.is_alive()  # a save's write waits for the one under way ...
    table.release.set()
    first.join(WAIT)
    second.join(WAIT)
    assert not first.is_alive() and not second.is_alive()
    assert table.writes == [{1: 1.0}, {1: 7.0, 2: 8.0}]  # ... then writes the rest after it


def test_the_writer_thread_writes_what_is_handed_over_until_stopped():
    table = _Table()
    updates = _updates(table)
    coord = tf.train.Coordinator()
    thread = PriorityWriterThread("PriorityWriterThread", coord, lambda: None, updates)
    thread.start()
    try:
        updates.put(np.array([4, 5], np.uint64), np.array([0.5, 0.25]))
        assert table.entered.wait(WAIT)
    finally:
        coord.request_stop()
        coord.join([thread], stop_grace_period_secs=WAIT)
    assert table.writes == [{4: 0.5, 5: 0.25}]
    assert not thread.is_alive()


def test_a_failing_write_stops_the_driver_with_an_error_naming_the_thread():
    table = _Table(error=RuntimeError("table gone"))
    updates = _updates(table)
    coord = tf.train.Coordinator()
    closed = threading.Event()
    thread = PriorityWriterThread("PriorityWriterThread", coord, closed.set, updates)
    thread.start()
    updates.put(np.array([1], np.uint64), np.array([1.0]))
    assert closed.wait(WAIT)  # every queue closed: no thread stays blocked
    with pytest.raises(ThreadError, match="PriorityWriterThread failed: RuntimeError: "
                                          "table gone"):
        coord.join([thread], stop_grace_period_secs=WAIT)
