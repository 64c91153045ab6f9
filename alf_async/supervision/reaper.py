"""The one rule for a parent's death: what it started gets SIGTERM, and SIGKILL a grace
later if still alive, however the parent ended (a clean stop, Ctrl-C, SIGKILL).

Every process this project starts for a parent (the launch's learner, actors and
spares, an experiment's seeds, a population's members, a search's workers)
gets SIGTERM the moment its parent dies (Linux `PR_SET_PDEATHSIG`,
`die_with_parent`): a run saves its checkpoint and stops, as on Ctrl-C. The
parent hands each child's PID to a watcher of its children (`guard`, one per
parent, in a session of its own, through a pipe) that notes the children's
descendants five times a second; once the parent is gone (the pipe's end of
input), it sends SIGTERM to those still alive (grandchildren too) and SIGKILL
to any left `ORPHAN_GRACE_SECS` later, so that one that ignores or hangs on
SIGTERM is no orphan either.

A launch's own Ray gets its own watcher (`start` with Ray's temp folder, a
grace of a second): Ray's agents (`ray::DashboardAgent`,
`ray::RuntimeEnvAgent`) outlived a launch by 60-70 s, re-parented to init, and
the temp folder stayed for good.

    python -m alf_async.supervision.reaper PARENT_PID GRACE_SECS [TEMP_DIR]  # Ray's
    python -m alf_async.supervision.reaper --children GRACE_SECS < PIDS    # guard's
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, Optional

_POLL_SECS = 0.2
_TERM_GRACE_SECS = 1.0  # Ray's agents: SIGTERM, then SIGKILL a second later
ORPHAN_GRACE_SECS = 30.0  # a parent's orphan: its checkpoint saved by then, or SIGKILL
_PR_SET_PDEATHSIG = 1
WATCHER_MODULE = "alf_async.supervision.reaper"  # in a watcher's command line


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


def watch(parent_pid: int, grace_secs: float, temp_dir: Optional[str] = None) -> None:
    """Notes `parent_pid`'s descendants until it ends, then reaps them (`grace_secs`
    from SIGTERM to SIGKILL) and removes `temp_dir`, if any."""
    parent_started = start_time(parent_pid)
    seen: Dict[int, str] = {}
    while parent_started is not None and start_time(parent_pid) == parent_started:
        seen.update(descendants(parent_pid))
        seen.pop(os.getpid(), None)
        time.sleep(_POLL_SECS)
    reap(seen, grace_secs)
    if temp_dir:
        shutil.rmtree(temp_dir, ignore_errors=True)


def start(temp_dir: Optional[str] = None,
          grace_secs: float = _TERM_GRACE_SECS) -> subprocess.Popen:
    """Starts a watcher of this process (and of its Ray's `temp_dir`), in a session of
    its own (a Ctrl-C to the parent's terminal does not end it before its work)."""
    return subprocess.Popen([sys.executable, "-m", WATCHER_MODULE, str(os.getpid()),
                             str(grace_secs), *([temp_dir] if temp_dir else [])],
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_GUARDS: Dict[int, subprocess.Popen] = {}  # a parent's pid: the watcher of its children


def is_watcher(pid: int) -> bool:
    """Whether process `pid` is a watcher of this module: a helper of its parent's that
    ends just after it (not one of a run's processes, for those who count them)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return WATCHER_MODULE in cmdline.read().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def guard(child_pid: int) -> None:
    """Hands `child_pid`, just started by this process, to the watcher of this process's
    children (started with the first, one per process): once this process is gone, the
    watcher reaps it and its descendants (`ORPHAN_GRACE_SECS`)."""
    watcher = _GUARDS.get(os.getpid())
    if watcher is None or watcher.poll() is not None:
        watcher = _GUARDS[os.getpid()] = subprocess.Popen(
            [sys.executable, "-m", WATCHER_MODULE, "--children",
             str(ORPHAN_GRACE_SECS)], stdin=subprocess.PIPE, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        watcher.stdin.write(f"{child_pid}\n".encode())
        watcher.stdin.flush()
    except OSError:
        pass  # the watcher died: the child still gets SIGTERM (`die_with_parent`)


def watch_children(lines, grace_secs: float, poll_secs: float = _POLL_SECS) -> None:
    """Reads the PIDs of a parent's children from `lines` (this watcher's stdin) until
    they end, which is when the parent has died (the kernel closes its end of the
    pipe); meanwhile notes every child's descendants. Then reaps them all."""
    seen: Dict[int, str] = {}
    lock, ended = threading.Lock(), threading.Event()

    def note() -> None:
        while not ended.wait(poll_secs):
            with lock:
                for pid in list(seen):
                    seen.update(descendants(pid))

    threading.Thread(target=note, daemon=True).start()
    for line in lines:
        started = start_time(int(line))
        if started is not None:
            with lock:
                seen[int(line)] = started
    ended.set()
    with lock:
        for pid in list(seen):
            seen.update(descendants(pid))
    reap(seen, grace_secs)


def _libc_prctl() -> Optional[Callable]:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux


_PRCTL = _libc_prctl()  # looked up here, not after a fork


def die_with_parent(parent_pid: int) -> None:
    """Makes this process get SIGTERM when its parent dies (Linux; elsewhere nothing).

    For a just-forked process (a `preexec_fn`): `parent_pid` is the parent it
    was forked from, and a parent already gone ends it at once.
    """
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:
        os._exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its work comes after the parent's end
    if sys.argv[1] == "--children":
        watch_children(sys.stdin, float(sys.argv[2]))
    else:
        watch(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
