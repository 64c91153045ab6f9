"""Ends what a launch's own Ray left behind once the launch has ended, however it
ended (a clean stop, Ctrl-C during Ray's start, SIGKILL).

Ray's agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) outlived a launch
by 60-70 s, re-parented to init, and the temp folder stayed for good. The
launch starts this watcher (`start`) before `ray.init`, in a session of its
own: it notes every descendant of the launch (PID and start time) five times
a second while the launch lives; once the launch is gone it sends SIGTERM to
those still alive, SIGKILL a second later, and removes Ray's temp folder.

    python -m alf_async.supervision.ray_reaper LAUNCH_PID TEMP_DIR
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, Optional

_POLL_SECS = 0.2
_TERM_GRACE_SECS = 1.0


def start_time(pid: int) -> Optional[str]:
    """The start time of process `pid` (tells a reused PID apart); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def descendants(pid: int) -> Dict[int, str]:
    """Every live descendant of `pid`: PID -> start time."""
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                continue
            for child in children:
                started = start_time(child)
                if started is not None and child not in found:
                    found[child] = started
                    todo.append(child)
    return found


def reap(processes: Dict[int, str], grace_secs: float = _TERM_GRACE_SECS) -> None:
    """SIGTERM to each of `processes` still the same process, SIGKILL after `grace_secs`."""
    alive = lambda: {pid for pid, started in processes.items() if start_time(pid) == started}
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_secs
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)


def watch(launch_pid: int, temp_dir: str) -> None:
    """Notes `launch_pid`'s descendants until it ends, then reaps them and removes
    `temp_dir`."""
    launch_started = start_time(launch_pid)
    seen: Dict[int, str] = {}
    while launch_started is not None and start_time(launch_pid) == launch_started:
        seen.update(descendants(launch_pid))
        seen.pop(os.getpid(), None)
        time.sleep(_POLL_SECS)
    reap(seen)
    shutil.rmtree(temp_dir, ignore_errors=True)


def start(temp_dir: str) -> subprocess.Popen:
    """Starts the watcher of this process and its Ray's `temp_dir`, in a session of its
    own (a Ctrl-C to the launch's terminal does not end it before its work)."""
    return subprocess.Popen([sys.executable, "-m", "alf_async.supervision.ray_reaper",
                             str(os.getpid()), temp_dir], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its work comes after the launch's end
    watch(int(sys.argv[1]), sys.argv[2])
