"""A warm spare: a process that has imported a command and waits to become it.

    python -m alf_async.spare alf_async.train --root_dir=runs/x ...

imports `alf_async.train` (TensorFlow and the rest: seconds), then blocks on
stdin at the lowest CPU priority (`SCHED_IDLE`, and its session's autogroup
at nice 19: it takes only idle cores). A line `go` promotes it: every thread
goes back to normal priority and it runs
the module's `run()` with the arguments given, as `python -m alf_async.train
--root_dir=runs/x ...` would. End of input (its supervisor is gone) ends it
with status 0 and nothing run. The supervisor keeps one per child and starts
a child's restart from it (`ChildSpec.spare_argv`), which saves the imports.
Where autogroup scheduling is on (one CPU share per session) a spare in a
session of its own takes its share at any thread priority unless its
autogroup is niced, and only a user allowed to lower nice values
(`can_wait_idle()`: root, or `RLIMIT_NICE` >= 20) gets the share back.

While it waits, its process name (`/proc/PID/comm`, what `ps -o comm` shows)
is `SPARE_NAME`; promoted, it is the module's file name (`train.py`).
"""

import ctypes
import importlib
import os
import resource
import sys
import threading
from typing import Callable, Sequence

SPARE_NAME = "alf-spare"
PROMOTE = b"go\n"
_PR_SET_NAME = 15


def waiting(cmdline: Sequence[str], name: str) -> bool:
    """Whether a process of `cmdline` (its argv) and process name `name` is a spare
    that has not been promoted (before it names itself too, at idle priority)."""
    if "alf_async.spare" not in cmdline:
        return False
    module = cmdline[cmdline.index("alf_async.spare") + 1:][:1]
    return not module or name != module[0].rsplit(".", 1)[-1] + ".py"


def _set_name(name: str) -> None:
    try:
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux


def _autogroup_nice(nice: int, pid: int = 0) -> None:
    """Sets the autogroup's nice value of a session leader (never a shared session's),
    this process's (pid 0) or another's."""
    pid = pid or os.getpid()
    try:
        if os.getsid(pid) != pid:
            return
        with open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:
        pass  # no autogroups, or not allowed


def can_wait_idle() -> bool:
    """Whether a spare in a session of its own can wait without taking a CPU share
    and get its share back when promoted."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as enabled:
            if enabled.read().strip() != "1":
                return True  # SCHED_IDLE alone keeps it off busy cores
    except OSError:
        return True
    limit = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return os.geteuid() == 0 or limit == resource.RLIM_INFINITY or limit >= 20


def normal_priority(pid: int = 0) -> None:
    """A process (0: this one) back to normal priority: its autogroup, and every
    thread's policy (allowed from SCHED_IDLE). The supervisor gives a spare it
    kills its priority back first: on a busy machine an idle process waits long
    for a core to die on."""
    pid = pid or os.getpid()
    _autogroup_nice(0, pid)
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return  # gone
    for tid in tids:
        try:
            os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
        except (OSError, AttributeError):
            pass


def idle_priority() -> None:
    """This thread (and the threads it starts) on idle cores only (Linux: `SCHED_IDLE`,
    and its session's autogroup at nice 19)."""
    _autogroup_nice(19)
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        pass


def _import_in_background(name: str) -> Callable[[], object]:
    """Imports `name` in a thread; returns `wait() -> module` (re-raises its error)."""
    found = {}

    def work():
        try:
            found["module"] = importlib.import_module(name)
        except BaseException as error:  # pylint: disable=broad-except  # raised by wait()
            found["error"] = error

    thread = threading.Thread(target=work, name="SpareImport", daemon=True)
    thread.start()

    def wait():
        thread.join()
        if "error" in found:
            raise found["error"]
        return found["module"]
    return wait


def main(argv) -> int:
    """`argv`: [MODULE, ARGS...]. Returns the exit status of an unpromoted spare.

    The import runs in a thread while the main thread waits for the word: a
    spare promoted before its import is done finishes it at normal priority.
    """
    if not argv:
        print("usage: python -m alf_async.spare MODULE [ARGS...]", file=sys.stderr)
        return 2
    _set_name(SPARE_NAME)
    idle_priority()  # the supervisor's spares are idle from their exec on
    imported = _import_in_background(argv[0])
    if sys.stdin.buffer.readline() != PROMOTE:
        return 0
    normal_priority()
    module = imported()
    normal_priority()  # the threads the import started meanwhile too
    _set_name(os.path.basename(module.__file__))
    sys.argv = [module.__file__, *argv[1:]]
    module.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
