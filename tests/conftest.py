import gc
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Every Ray a test starts (in this process or in a launch) binds and reaches 127.0.0.1
# only, reports no usage statistics and asks no cloud metadata server: set before
# anything imports ray.
from alf_async.supervision.ray_backend import LOCAL_RAY_ENV  # noqa: E402

os.environ.update(LOCAL_RAY_ENV)

# Two logical CPUs, so that the multi-device learner is tested without GPUs.
# This must happen before TensorFlow initialises its devices.
from alf_async.learning.devices import split_host_cpu  # noqa: E402

split_host_cpu(2)

import fakes  # noqa: E402
from side_by_side import pytest_runtest_protocol  # noqa: E402,F401  the `alone` lock
from alf_async.collection.driver_thread import live_driver_threads  # noqa: E402


def pytest_collection_finish(session):
    """Freezes what collecting imported (TensorFlow's and the libraries' ~million
    long-lived objects), as the commands do (`alf_async.training.gc_policy`): every
    later collection, each module's at its end included, skips them (0.5-1 s each
    before)."""
    del session
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _driver_threads_at_test_start():
    """Notes the driver threads alive before each test (`fakes.leaked_driver_threads`)."""
    fakes.THREADS_AT_TEST_START = set(live_driver_threads())


@pytest.fixture(autouse=True, scope="module")
def _collect_a_modules_garbage_at_its_end():
    """Frees what a test module left in reference cycles between modules, in this
    thread: a destructor that waits (a sampler's) then never runs inside the next
    module's threads."""
    yield
    gc.collect()

