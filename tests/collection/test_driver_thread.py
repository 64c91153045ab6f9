"""`DriverThread`'s own settings: the niceness its threads run at."""

import os
import sys
import threading

import gin
import pytest
import tensorflow as tf

from alf_async.collection.driver_thread import DriverThread, driver_thread_niceness

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread priorities are Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class _Probe(DriverThread):
    """Reads its own nice value and that of a thread it starts, then stops."""

    def __init__(self, coord):
        super().__init__("Probe", coord, lambda: None)
        self.seen = {}

    def _step(self) -> None:
        self.seen["own"] = _nice()
        child = threading.Thread(target=lambda: self.seen.setdefault("child", _nice()))
        child.start()
        child.join(timeout=10)
        self._coord.request_stop()


def _probe() -> dict:
    coord = tf.train.Coordinator()
    probe = _Probe(coord)
    probe.start()
    coord.join([probe], stop_grace_period_secs=10)
    return probe.seen


@pytest.fixture
def niceness():
    def bind(value):
        gin.bind_parameter("alf_async.driver_thread_niceness.niceness", value)
    yield bind
    gin.clear_config()


@linux_only
def test_driver_threads_and_what_they_start_run_nicer_by_the_setting(niceness):
    before = _nice()
    niceness(5)
    seen = _probe()
    assert seen == {"own": min(19, before + 5), "child": min(19, before + 5)}
    assert _nice() == before  # the thread that built it keeps its priority


@linux_only
def test_without_the_setting_driver_threads_run_as_their_builder():
    assert _probe() == {"own": _nice(), "child": _nice()}


@pytest.mark.parametrize("value", [-1, 20, 2.5, "5"])
def test_a_niceness_outside_0_to_19_is_one_line_naming_the_setting(niceness, value):
    niceness(value)
    with pytest.raises(ValueError, match=r"^driver_thread_niceness.niceness must be an "
                                         r"integer in \[0, 19\], got "):
        driver_thread_niceness()
