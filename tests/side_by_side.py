"""Tests side by side (pytest-xdist's workers, `pytest -n 2`): every test holds a shared
lock and one marked `alone` the exclusive one, so that it runs while no other test does.

A turnstile lets no new test in while an `alone` test waits, so that it is not starved.
The lock is taken around the whole test (its fixtures' setup and teardown included) and
outside pytest-timeout's clock, so that a test's time limit is its own. Without xdist
nothing is locked. Light: no TensorFlow (tests/test_side_by_side.py runs it alone).
"""

import contextlib
import fcntl
import os
import tempfile
from typing import Optional

import pytest


@contextlib.contextmanager
def _flock(run: str, name: str, mode: int):
    with open(os.path.join(tempfile.gettempdir(), f"alf_async-tests-{run}.{name}"), "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def turn(alone: bool, run: Optional[str]):
    """Holds this test's share of the suite (all of it if `alone`) for the block.

    Args:
        alone: whether the test runs with no other beside it.
        run: the xdist test run's id, which names the lock files (None: no lock).
    """
    if run is None:
        yield
        return
    with contextlib.ExitStack() as held:
        with _flock(run, "turnstile", fcntl.LOCK_EX):
            held.enter_context(_flock(run, "tests", fcntl.LOCK_EX if alone else fcntl.LOCK_SH))
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    del nextitem
    with turn(item.get_closest_marker("alone") is not None,
              os.environ.get("PYTEST_XDIST_TESTRUNUID")):
        yield
