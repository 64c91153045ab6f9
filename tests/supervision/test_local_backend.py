"""The local backend's warm spares: how many are kept, in what order they start and go."""

import functools
import os
import signal
import sys
import time

from alf_async.supervision import spare as spare_lib
from alf_async.supervision.local import Spares, popen_in_session

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fake_child.py


def _tend_until(spares, condition, argv, count, timeout=30.0):
    deadline = time.monotonic() + timeout
    popen = functools.partial(popen_in_session, spare=True)
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        spares.tend("learner", argv, True, popen, count)
        time.sleep(0.02)


def test_two_spares_start_one_after_the_other_and_the_oldest_is_promoted_first(
        tmp_path, monkeypatch):
    """The second spare starts only once the first waits ready (two that get ready at
    once would halve the CPU each has), never more than `count` are kept, and a
    promotion takes the oldest, the one most likely ready."""
    monkeypatch.setenv("PYTHONPATH", TESTS)  # the spares import fake_child
    ledger = tmp_path / "ledger"
    argv = [sys.executable, "-m", "alf_async.supervision.spare", spare_lib.NORMAL_PRIORITY,
            "fake_child", str(ledger), "serve"]
    spares = Spares()
    started = []
    try:
        spares.tend("learner", argv, True, functools.partial(popen_in_session, spare=True), 2)
        first = spares.waiting["learner"][0]
        started.append(first)
        for _ in range(20):  # not ready yet (still importing): no second one
            if spare_lib.is_ready(first.pid):
                break
            spares.tend("learner", argv, True, functools.partial(popen_in_session, spare=True), 2)
            assert [s.pid for s in spares.waiting["learner"]] == [first.pid]
        _tend_until(spares, lambda: len(spares.waiting["learner"]) == 2, argv, 2)
        second = spares.waiting["learner"][1]
        started.append(second)
        assert spare_lib.is_ready(first.pid)  # the second started after the first was ready
        _tend_until(spares, lambda: spare_lib.is_ready(second.pid), argv, 2)
        for _ in range(5):
            spares.tend("learner", argv, True, functools.partial(popen_in_session, spare=True), 2)
        assert [s.pid for s in spares.waiting["learner"]] == [first.pid, second.pid]
        assert spares.promote("learner") is first
        _tend_until(spares, lambda: len(spares.waiting["learner"]) == 2, argv, 2)
        third = spares.waiting["learner"][1]
        started.append(third)
        assert spares.waiting["learner"][0] is second and third.pid not in (first.pid, second.pid)
        _tend_until(spares, lambda: ledger.exists() and f"start {first.pid}" in
                    ledger.read_text(), argv, 2)  # the promoted one became the command
    finally:
        spares.drop(wait=True)
        for process in started:
            process.kill()
    assert spares.waiting == {}
    assert all(process.poll() is not None for process in started)


def test_a_spare_that_dies_is_replaced_and_a_stopped_command_gets_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", TESTS)
    argv = [sys.executable, "-m", "alf_async.supervision.spare", spare_lib.NORMAL_PRIORITY,
            "fake_child", str(tmp_path / "ledger"), "serve"]
    spares = Spares()
    popen = functools.partial(popen_in_session, spare=True)
    try:
        spares.tend("learner", argv, False, popen, 2)  # the command is not running
        assert not spares.waiting.get("learner")
        spares.tend("learner", argv, True, popen, 1)
        dead = spares.waiting["learner"][0]
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait(timeout=10)
        spares.tend("learner", argv, True, popen, 1)
        assert [s.pid for s in spares.waiting["learner"]] != [dead.pid]
        assert len(spares.waiting["learner"]) == 1
    finally:
        spares.drop(wait=True)
