"""The watcher of a launch's own Ray: what the launch left is gone within 5 s of its
end, however it ended, and only that."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from alf_async.supervision import ray_reaper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A stand-in launch: it starts the watcher, then a child in a session of its own
# whose own child ignores SIGTERM (as Ray's agents outlived the launch), and waits.
_FAKE_LAUNCH = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, {root!r})
    from alf_async.supervision import ray_reaper
    reaper = ray_reaper.start({temp!r})
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    agent = ("import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', %r], "
             "start_new_session=True); print(g.pid, flush=True); time.sleep(600)" % stubborn)
    child = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    print(reaper.pid, child.pid, child.stdout.readline().strip(), flush=True)
    time.sleep(600)
""")


def _alive(pid):
    return ray_reaper.start_time(pid) is not None


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
        ray_reaper.reap({other.pid: "0"}, grace_secs=0.2)  # another start time
        assert other.poll() is None
    finally:
        other.kill()
        other.wait(timeout=10)
