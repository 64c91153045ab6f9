"""A warm spare: a process that has imported a command and waits to become it.

    python -m alf_async.supervision.spare alf_async.train --root_dir=runs/x ...

imports `alf_async.train` and runs its `warm_up()` where it has one (a command
that checks its flags before its heavy imports does those imports there:
TensorFlow and the rest, seconds), then blocks on
stdin at the lowest CPU priority (`SCHED_IDLE`, and its session's autogroup
at nice 19: it takes only idle cores). A line `go` promotes it: every thread
goes back to normal priority and it runs
the module's `run()` with the arguments given, as `python -m alf_async.train
--root_dir=runs/x ...` would. A module that declares `RUNS_AHEAD = True`
is run at once instead, and waits itself
(`alf_async.supervision.promotion.await_promotion()`) where it
would first act: `train` builds and compiles its update ahead (a hot spare). End of input (its supervisor is gone) ends it
with status 0 and nothing run. The supervisor keeps one per child and starts
a child's restart from it (`ChildSpec.spare_argv`), which saves the imports.
Where autogroup scheduling is on (one CPU share per session) a spare in a
session of its own takes its share at any thread priority unless its
autogroup is niced, and only a user allowed to lower nice values
(`can_wait_idle()`: root, or `RLIMIT_NICE` >= 20) gets the share back.

While it gets ready, its process name (`/proc/PID/comm`, what `ps -o comm`
shows) is `SPARE_NAME`; once it waits ready, `READY_NAME` (`is_ready()`: a
supervisor that keeps more than one spare starts the next when the last is
ready); promoted, the module's file name (`train.py`).
"""

import ctypes
import functools
import importlib
import os
import resource
import sys
import threading
from typing import Sequence

from alf_async.supervision import promotion

SPARE_NAME = "alf-spare"
READY_NAME = "alf-spare-ready"  # 15 characters: the most a process name holds
PROMOTE = b"go\n"
NORMAL_PRIORITY = "--normal_priority"  # a first argument: get ready at normal priority
_PR_SET_NAME = 15


def waiting(cmdline: Sequence[str], name: str) -> bool:
    """Whether a process of `cmdline` (its argv) and process name `name` is a spare
    that has not been promoted (before it names itself too, at idle priority)."""
    if "alf_async.supervision.spare" not in cmdline:
        return False
    module = [arg for arg in cmdline[cmdline.index("alf_async.supervision.spare") + 1:]
              if arg != NORMAL_PRIORITY][:1]
    return not module or name != module[0].rsplit(".", 1)[-1] + ".py"


def is_ready(pid: int) -> bool:
    """Whether spare `pid` waits ready for its promotion (False when gone, or outside
    Linux: no `/proc`)."""
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() == READY_NAME
    except OSError:
        return False


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


def _become_command(command_file: str) -> None:
    """What a promoted spare does first: every thread at normal priority, and the
    command's name (`python -m alf_async.train` would have it)."""
    normal_priority()  # the threads started since the word too
    sys.argv[0] = command_file
    _set_name(os.path.basename(command_file))


def _read_line(fd: int) -> bytes:
    """A line from `fd`, unbuffered: no lock of `sys.stdin` held at the interpreter's
    exit (a spare that runs ahead may exit before its word, with this still waiting)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def _listen(gate: threading.Event) -> None:
    """Waits for the word on stdin: sets `gate` at normal priority; anything
    else (end of input: its supervisor is gone or drops it) ends the spare at once."""
    if _read_line(0) != PROMOTE:
        os._exit(0)  # nothing done yet that needs an orderly exit
    normal_priority()  # an unfinished import or run-ahead goes on at full speed
    gate.set()


def main(argv) -> int:
    """`argv`: [--normal_priority] MODULE ARGS... Returns the exit status of an
    unpromoted spare.

    The main thread imports the module (and runs it ahead, if it says so)
    while a thread waits for the word; at idle priority unless
    `--normal_priority` (a spare that must be ready soon, whatever the load).
    """
    normal = argv[:1] == [NORMAL_PRIORITY]
    argv = argv[1:] if normal else argv
    if not argv:
        print(f"usage: python -m alf_async.supervision.spare [{NORMAL_PRIORITY}] MODULE [ARGS...]",
              file=sys.stderr)
        return 2
    _set_name(SPARE_NAME)
    if not normal:
        idle_priority()  # the supervisor's idle spares are idle from their exec on
    gate = threading.Event()
    threading.Thread(target=_listen, args=(gate,), name="SparePromotion", daemon=True).start()
    module = importlib.import_module(argv[0])
    promotion.install(gate, functools.partial(_become_command, module.__file__),
                      on_ready=functools.partial(_set_name, READY_NAME))
    if hasattr(module, "warm_up"):  # a command that defers its heavy imports past its flags
        module.warm_up()
    # Until the promotion the command is named as the spare: absl's `app.run()` names
    # the process after `sys.argv[0]`, and a spare that runs ahead runs it early.
    sys.argv = [SPARE_NAME, *argv[1:]]
    if not getattr(module, "RUNS_AHEAD", False):
        promotion.await_promotion()
    module.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
