"""Tests of `alf_async.errors`: the starvation watchdog and `stop_with_error`."""

import threading
import time

import pytest
import tensorflow as tf

from alf_async.errors import LearnerStarvedError, StarvationWatchdog, ThreadError, stop_with_error


def _recorder():
    errors, failed = [], threading.Event()

    def fail(error):
        errors.append(error)
        failed.set()
    return errors, failed, fail


def test_a_wait_longer_than_the_timeout_fails_with_the_diagnosis():
    errors, failed, fail = _recorder()
    watchdog = StarvationWatchdog(0.05, fail, lambda: "learn queue 0/2")
    with watchdog.guard():
        assert failed.wait(timeout=10)
    assert len(errors) == 1 and isinstance(errors[0], LearnerStarvedError)
    assert str(errors[0]) == ("No learn batch within learner_queue_timeout=0.05s: "
                              "learn queue 0/2")


def test_a_wait_that_ends_in_time_fails_nothing():
    errors, failed, fail = _recorder()
    watchdog = StarvationWatchdog(0.2, fail, lambda: "unused")
    for _ in range(3):  # each guard has its own timer, cancelled on exit
        with watchdog.guard():
            time.sleep(0.1)
    assert not failed.wait(timeout=0.4)
    assert errors == []


def test_the_timer_is_cancelled_when_the_block_raises():
    errors, failed, fail = _recorder()
    watchdog = StarvationWatchdog(0.1, fail, lambda: "unused")
    with pytest.raises(KeyError):
        with watchdog.guard():
            raise KeyError("batch")
    assert not failed.wait(timeout=0.3)


def test_the_first_error_recorded_wins_and_the_queues_close():
    coord = tf.train.Coordinator()
    closed = []
    stop_with_error(coord, lambda: closed.append(1), ThreadError("EnvThread0 failed: boom"))
    stop_with_error(coord, lambda: closed.append(2), LearnerStarvedError("later"))
    assert coord.should_stop() and closed == [1, 2]
    with pytest.raises(ThreadError, match="EnvThread0 failed: boom"):
        coord.raise_requested_exception()


def test_a_contract_is_read_off_its_protocol_and_a_missing_member_is_named():
    from typing import Protocol  # pylint: disable=import-outside-toplevel

    from alf_async.errors import check_contract, protocol_members  # noqa: E402

    class Source(Protocol):
        weighted: bool

        def next(self) -> int:
            """The next item."""

        def close(self) -> None:
            """Releases it."""

    class Half:
        weighted = False

        def next(self):
            return 1

    assert protocol_members(Source) == ("weighted", "next", "close")
    with pytest.raises(TypeError, match=r"^Half is not a source: it lacks close \(see .*Source\)"):
        check_contract(Half(), Source, "a source")
    Half.close = lambda self: None
    check_contract(Half(), Source, "a source")


def test_alarms_fire_once_when_due_never_when_disarmed_and_start_no_thread_each():
    from alf_async.errors import fires_after  # pylint: disable=import-outside-toplevel
    fired, threads = [], threading.active_count()
    for _ in range(200):  # disarmed in time: nothing fires, no thread per arm
        with fires_after(5.0, fired.append, "late"):
            pass
    assert threading.active_count() <= threads + 1
    start = time.monotonic()
    with fires_after(0.05, fired.append, "due"):
        with fires_after(0.2, lambda: 1 / 0):  # a failing call does not stop the others
            time.sleep(0.3)
        with fires_after(0.05, fired.append, "again"):
            time.sleep(0.2)
    assert fired == ["due", "again"] and time.monotonic() - start < 1.0
