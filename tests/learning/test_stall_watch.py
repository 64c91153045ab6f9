"""`StallWatch`: a long wait for data warns once, with every thread's stack on disk."""

import threading
import time

import pytest

from alf_async.learning.stall_watch import StallWatch


def _a_thread_that_holds_the_data(release):
    release.wait(timeout=10)


def test_a_wait_longer_than_the_setting_warns_once_with_every_stack(tmp_path):
    watch = StallWatch(0.2, str(tmp_path / "stalls"))
    release = threading.Event()
    holder = threading.Thread(target=_a_thread_that_holds_the_data, args=(release,),
                              name="DataHolder")
    holder.start()
    try:
        with watch.guard("a learn batch"):
            time.sleep(0.8)  # four times the setting: still one warning
    finally:
        release.set()
        holder.join(timeout=10)
    assert watch.stalls == 1
    stacks = open(watch.last_stacks_file).read()
    assert "DataHolder" in stacks  # the threads' names, then their stacks
    assert "_a_thread_that_holds_the_data" in stacks
    assert "test_a_wait_longer_than_the_setting_warns_once_with_every_stack" in stacks
    assert [p.name for p in (tmp_path / "stalls").iterdir()] == [
        watch.last_stacks_file.rsplit("/", 1)[1]]


def test_a_short_wait_or_no_setting_writes_nothing(tmp_path):
    watch = StallWatch(5.0, str(tmp_path / "stalls"))
    with watch.guard("a learn batch"):
        time.sleep(0.05)
    off = StallWatch(None, str(tmp_path / "stalls"))
    with off.guard("a learn batch"):
        time.sleep(0.05)
    assert watch.stalls == off.stalls == 0 and not (tmp_path / "stalls").exists()
    with pytest.raises(ValueError, match="stall_warning_secs must be >= 0"):
        StallWatch(-1.0, None)
