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
        with watch.guard("the first learn batch"):
            time.sleep(0.4)  # the pipeline starting: not a stall
        assert watch.stalls == 0
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
    for _ in range(2):
        with watch.guard("a learn batch"):
            time.sleep(0.05)
    off = StallWatch(None, str(tmp_path / "stalls"))
    with off.guard("a learn batch"):
        time.sleep(0.05)
    assert watch.stalls == off.stalls == 0 and not (tmp_path / "stalls").exists()
    with pytest.raises(ValueError, match="stall_warning_secs must be >= 0"):
        StallWatch(-1.0, None)


def test_the_warning_says_what_the_pipeline_holds_and_a_failing_diagnosis_does_not_stop_it(
        tmp_path, caplog):
    watch = StallWatch(0.1, str(tmp_path / "stalls"),
                       diagnose=lambda: "2 unrolls in the Reverb queue")
    with watch.guard("the first learn batch"):
        pass
    with watch.guard("a learn batch"):
        time.sleep(0.4)
    assert "2 unrolls in the Reverb queue" in open(watch.last_stacks_file).read()
    broken = StallWatch(0.1, None, diagnose=lambda: 1 / 0)
    with broken.guard("the first learn batch"):
        pass
    with broken.guard("a learn batch"):
        time.sleep(0.4)
    lines = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
    assert lines[0].startswith("The learner has waited 0.1 s for a learn batch "
                               "(2 unrolls in the Reverb queue); every thread's stack is in ")
    assert lines[1] == ("The learner has waited 0.1 s for a learn batch "
                        "(no diagnosis: division by zero)")
