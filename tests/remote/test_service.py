"""`ReverbService`: when it serves and how it closes; `ActorRegistry`: unrolls
delivered twice or skipped, by incarnation and sequence."""

import threading
import types
import time

import pytest
import tensorflow as tf

reverb = pytest.importorskip("reverb")

from alf_async import events  # noqa: E402
from alf_async.remote.service import ActorRegistry, ReverbService  # noqa: E402


def test_close_gives_up_on_a_stuck_reader_within_its_bound(caplog):
    """A read blocked after an actor died mid-write must not hold a SIGTERM's stop
    past 5 s: close waits 1.5 s and leaves the server to the end of the process."""
    service = ReverbService(None, [], tf.Variable(0, dtype=tf.int64), num_envs=1)
    blocked = threading.Event()
    stuck = threading.Thread(target=blocked.wait, args=(30,), daemon=True)
    stuck.start()
    service._threads = [stuck]  # pylint: disable=protected-access
    start = time.monotonic()
    try:
        service.close()
        assert time.monotonic() - start < 3.0
        assert "still running after 1.5 s" in caplog.text
    finally:
        blocked.set()


def test_a_repeated_sequence_is_a_duplicate_and_a_skipped_one_is_missing(caplog, tmp_path):
    events.configure(str(tmp_path), "learner")
    try:
        registry = ActorRegistry(timeout_secs=30.0)
        for sequence in (0, 1, 2, 2, 1, 4):  # 2 and 1 again, 3 skipped
            registry.seen(task=0, incarnation=7, sequence=sequence)
    finally:
        events.configure(None, "learner")
    assert (registry.duplicated, registry.missing) == (2, 1)
    assert registry.unrolls(0) == 6
    assert "Actor task 0 delivered unroll 2 again (after 2)" in caplog.text
    assert [(e["task"], e["unroll"]) for e in events.read_events(str(tmp_path))
            if e["event"] == "unroll_duplicated"] == [(0, 2), (0, 1)]  # what the ledger counts


def test_a_restarted_process_counts_from_0_again_without_a_duplicate():
    registry = ActorRegistry(timeout_secs=30.0)
    for incarnation in (1, 2):  # the restart: a new incarnation
        for sequence in range(3):
            registry.seen(task=1, incarnation=incarnation, sequence=sequence)
    registry.seen(task=0, incarnation=1, sequence=0)  # another task, the same numbers
    assert (registry.duplicated, registry.missing) == (0, 0)


def test_a_restarted_learner_counts_an_actor_it_first_sees_mid_way_from_there():
    """The actor outlived the learner: its numbers go on from 212; none is missing."""
    registry = ActorRegistry(timeout_secs=30.0)
    for sequence in (212, 213, 215):
        registry.seen(task=0, incarnation=9, sequence=sequence)
    assert (registry.duplicated, registry.missing) == (0, 1)  # only 214


class _FlakyDataset:
    """A dataset whose first `failures` iterators are refused as unavailable."""

    def __init__(self, failures):
        self.failures, self.tries = failures, 0

    def __iter__(self):
        self.tries += 1
        if self.tries <= self.failures:
            raise tf.errors.UnavailableError(None, None, "Socket closed")
        return iter([1, 2])


def test_a_sampler_refused_as_unavailable_at_its_first_connection_is_opened_again():
    """A learner restarted in the same process on the same port: gRPC handed the new
    reader's first connection a channel of the stopped server ("Socket closed"), which
    ended the reader thread (the CI failure of the reconnect test)."""
    from alf_async.remote.service import UnrollReaderThread  # pylint: disable=import-outside-toplevel
    queues = types.SimpleNamespace(close_all=lambda: None)
    reader = UnrollReaderThread("UnrollReaderThread", tf.train.Coordinator(), queues,
                                lambda: "127.0.0.1:1", ActorRegistry(30.0), secret=1)
    reader._OPEN_RETRY_SECS = 0.01  # pylint: disable=protected-access
    reader._dataset = _FlakyDataset(failures=2)  # pylint: disable=protected-access
    assert list(reader._open_sampler()) == [1, 2]  # pylint: disable=protected-access
    assert reader._dataset.tries == 3  # pylint: disable=protected-access
    reader._dataset = _FlakyDataset(failures=10)  # pylint: disable=protected-access
    with pytest.raises(tf.errors.UnavailableError):
        reader._open_sampler()  # pylint: disable=protected-access
    assert reader._dataset.tries == 5  # bounded  # pylint: disable=protected-access
