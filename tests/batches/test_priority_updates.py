"""`PriorityUpdates` and `PriorityWriterThread`: the learner's updates written off its
thread, batched, in order, and all of them before a save (a scripted table)."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from alf_async.batches.priority_updates import PriorityUpdates, PriorityWriterThread
from alf_async.errors import ThreadError

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
