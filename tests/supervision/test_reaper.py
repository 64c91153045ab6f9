"""The one rule for a parent's death (`supervision.reaper`): its children get SIGTERM, and
SIGKILL a grace later; what a launch's own Ray left is gone within 5 s of its end,
however it ended, and only that."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from alf_async.supervision import reaper as reaper_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A stand-in launch: it starts the watcher, then a child in a session of its own
# whose own child ignores SIGTERM (as Ray's agents outlived the launch), and waits.
_FAKE_LAUNCH = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, {root!r})
    from alf_async.supervision import reaper as reaper_lib
    reaper = reaper_lib.start({temp!r})
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    agent = ("import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', %r], "
             "start_new_session=True); print(g.pid, flush=True); time.sleep(600)" % stubborn)
    child = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    print(reaper.pid, child.pid, child.stdout.readline().strip(), flush=True)
    time.sleep(600)
""")


# A stand-in parent of both kinds of children: the launch's (`popen_in_session`) and the
# many-runs commands' (`placement`), one that saves on SIGTERM and one that ignores it.
_FAKE_PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from alf_async.supervision import local, placement, reaper
    reaper.ORPHAN_GRACE_SECS = 1.0
    child = [sys.executable, {fake!r}, {ledger!r}]
    local.popen_in_session(child + ["serve"])
    local.popen_in_session(child + ["stubborn"])
    placement.LocalPlacement().start("seed", child + ["serve"], {root_dir!r})
    placement.LocalPlacement().start("seed", child + ["stubborn"], {root_dir!r})
    time.sleep(600)
""")


def _alive(pid):
    return reaper_lib.start_time(pid) is not None


@pytest.mark.alone
def test_a_killed_launchs_processes_and_temp_folder_are_gone_within_5_s(tmp_path):
    temp = tmp_path / "alf_ray_x"
    (temp / "session").mkdir(parents=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    launch = subprocess.Popen([sys.executable, "-c", _FAKE_LAUNCH.format(root=ROOT,
                                                                         temp=str(temp))],
                              stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        pids = [int(p) for p in launch.stdout.readline().split()]
        reaper, child, grandchild = pids
        assert all(_alive(p) for p in pids)
        time.sleep(1.0)  # the watcher notes the launch's descendants 5 times a second
        launch.kill()
        launch.wait(timeout=10)
        start = time.monotonic()
        while (any(_alive(p) for p in (child, grandchild)) or temp.exists()) \
                and time.monotonic() - start < 5:
            time.sleep(0.05)
        assert not _alive(child) and not _alive(grandchild), "outlived the launch by 5 s"
        assert not temp.exists()
        deadline = time.monotonic() + 5
        while _alive(reaper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(reaper)  # it ends after its work
        assert bystander.poll() is None  # not the launch's: untouched
    finally:
        for pid in [*pids, bystander.pid]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        bystander.wait(timeout=10)
        if launch.poll() is None:
            launch.kill()
            launch.wait(timeout=10)


def test_a_reused_pid_is_not_killed():
    """A process noted once, gone, and its PID's start time differs: left alone."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        reaper_lib.reap({other.pid: "0"}, grace_secs=0.2)  # another start time
        assert other.poll() is None
    finally:
        other.kill()
        other.wait(timeout=10)


def _lines(ledger, word):
    try:
        with open(ledger) as f:
            return [int(line.split()[1]) for line in f if line.startswith(word)]
    except FileNotFoundError:
        return []


def _wait(condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_dead_parents_children_get_sigterm_then_sigkill_after_the_grace(tmp_path):
    """Both spawners: a child that saves on SIGTERM gets it (its `term` line), one that
    ignores it is SIGKILLed a grace later; none outlives its parent by long."""
    ledger = str(tmp_path / "ledger")
    code = _FAKE_PARENT.format(root=ROOT, fake=os.path.join(ROOT, "tests", "fake_child.py"),
                               ledger=ledger, root_dir=str(tmp_path / "run"))
    parent = subprocess.Popen([sys.executable, "-c", code])
    pids = []
    try:
        assert _wait(lambda: len(_lines(ledger, "start")) == 4, 60), "children not started"
        pids = _lines(ledger, "start")
        time.sleep(1.0)  # the watcher notes the parent's descendants 5 times a second
        watchers = [p for p in reaper_lib.descendants(parent.pid) if reaper_lib.is_watcher(p)]
        assert len(watchers) == 1 and not reaper_lib.is_watcher(pids[0])  # one per parent
        pids += watchers
        parent.kill()
        parent.wait(timeout=10)
        assert _wait(lambda: len(_lines(ledger, "term")) == 2, 10), "no SIGTERM first"
        assert _wait(lambda: not any(_alive(p) for p in pids), 15), "an orphan outlived 15 s"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
