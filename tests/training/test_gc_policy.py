"""Tests for alf_async.training.gc_policy: the commands' garbage-collection settings."""

import gc
import subprocess
import sys

import pytest

from alf_async.training import gc_policy


@pytest.fixture(autouse=True)
def restore_gc():
    """Leaves the test process's collector as it found it (frozen, by tests/conftest.py)."""
    was_enabled, was_frozen = gc.isenabled(), gc.get_freeze_count() > 0
    yield
    gc.unfreeze()
    if was_frozen:
        gc.freeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


class _Node:  # an object the collector tracks
    pass


def test_imports_uncollected_turns_the_collector_off_then_freezes_what_the_block_made():
    gc.enable()
    gc.unfreeze()
    with gc_policy.imports_uncollected():
        assert not gc.isenabled()
        made = [_Node() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made)


def test_imports_uncollected_leaves_a_collector_that_was_off_off():
    gc.disable()
    with gc_policy.imports_uncollected():
        pass
    assert not gc.isenabled()


def test_imports_uncollected_restores_the_collector_when_the_block_raises():
    gc.enable()
    with pytest.raises(ImportError):
        with gc_policy.imports_uncollected():
            raise ImportError("no such module")
    assert gc.isenabled()


def test_exits_fast_freezes_everything_alive_when_its_block_ends():
    gc.unfreeze()
    with pytest.raises(SystemExit):
        with gc_policy.exits_fast():
            alive = [_Node() for _ in range(100)]
            raise SystemExit(0)
    assert gc.get_freeze_count() >= len(alive)


_COUNT_COLLECTIONS_WHILE_IMPORTING = """
import gc
import alf_async  # the package itself (the old gym's import) is not the command's
collections = []
gc.callbacks.append(lambda phase, info: collections.append(info) if phase == "start" else None)
import sys
import {module} as command
assert "tensorflow" not in sys.modules  # its flags are checked first
collections.clear()  # the light imports (absl, gin) walk a small heap
command.warm_up()  # the imports that main() (or a warm spare) runs
print(len(collections), gc.get_freeze_count(), gc.isenabled())
"""


@pytest.mark.slow
@pytest.mark.parametrize("module", ["alf_async.train", "alf_async.actor"])
def test_a_command_imports_tensorflow_without_a_collection_and_freezes_it(module):
    done = subprocess.run([sys.executable, "-c", _COUNT_COLLECTIONS_WHILE_IMPORTING.format(
        module=module)], capture_output=True, text=True, timeout=120, check=True)
    collections, frozen, enabled = done.stdout.split()
    assert int(collections) == 0, done.stdout  # ~800 before, ~0.8 s of a start
    assert int(frozen) > 100_000  # TensorFlow's objects, skipped by later collections
    assert enabled == "True"
