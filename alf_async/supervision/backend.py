"""What the launch needs from where its processes run: the backend interface.

A `Backend` starts the command of a `ChildSpec` and hands back a `Process`
that the `Supervisor` polls, signals and reaps; it keeps each command's warm
spare (`spare.py`) where the command runs, and starts a restart from it.
Two implement it, registered by name in `backends.BACKENDS`:

- `local.LocalBackend`: subprocesses of the launch on this host (the default);
- `ray_backend.RayBackend`: each process hosted by a Ray actor on a node of a
  Ray cluster, placed by its resources and moved when its node is lost; the
  host keeps the spare beside its command.

The supervisor's restart policy (budget, backoff, stop grace) is the same on
both. Thread-safety: both are driven from the supervisor's one thread.
"""

import dataclasses
from typing import Optional, Protocol, Sequence, Tuple, runtime_checkable


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """A process to keep alive.

    Attributes:
        name: names it in log lines ("learner", "actor 1").
        argv: its command line.
        log_path: its stdout and stderr are appended here (None: the supervisor's).
        primary: its exit with status 0 ends the group (the learner finished).
        finishes: its exit with status 0 is its own end: it is not restarted and
            the others go on (a multi-worker learner's other workers).
        spare_argv: the command line of its warm spare (`alf_async.supervision.spare`),
            started beside the child at idle priority (unless it says
            `--normal_priority`); a restart is then the spare's promotion
            (None: a restart starts `argv` cold).
        spares: how many such spares to keep ready: more than one covers
            faults that come sooner than a spare gets ready.
        gang: children of one gang restart together: one that exits (not its
            own end) has the others SIGKILLed, and all start again (a
            multi-worker learner: its workers' all-reduce group takes no new
            member; every worker resumes from the chief's checkpoint).
    """
    name: str
    argv: Sequence[str]
    log_path: Optional[str] = None
    primary: bool = False
    spare_argv: Optional[Sequence[str]] = None
    finishes: bool = False
    spares: int = 1
    gang: Optional[str] = None


@runtime_checkable
class Process(Protocol):
    """One started command, wherever it runs.

    `returncode` is None while it runs, then as `subprocess.Popen`'s: the
    exit status, or -N when signal N ended it (a host or node lost reads as
    -SIGKILL, and `lost` then says why; None otherwise).
    """
    pid: int
    returncode: Optional[int]
    lost: Optional[str]

    def poll(self) -> Optional[int]:
        """`returncode`, refreshed without blocking."""

    def signal(self, signum: int) -> None:
        """Sends `signum` to the command and the processes it started."""

    def wait(self, timeout: float) -> Optional[int]:
        """Waits up to `timeout` seconds for the exit; `returncode`."""

    def kill(self, wait: bool = True) -> None:
        """SIGKILLs it and what it started; with `wait`, reaps it too."""


@runtime_checkable
class Backend(Protocol):
    """Starts commands; releases what it holds on `close()`."""

    name: str

    def start(self, spec: ChildSpec) -> Process:
        """Starts `spec.argv`: its warm spare promoted where one is ready, else cold."""

    def tend(self, spec: ChildSpec, running: bool) -> None:
        """Keeps a warm spare of a `running` child with `spec.spare_argv` ready."""

    def drop_spares(self, wait: bool) -> None:
        """SIGKILLs every spare (at normal priority); with `wait`, reaps them too."""

    def place_learner(self, name: str, root_dir: str, port: int) -> Tuple[str, int, int]:
        """Places learner worker `name` before anything starts; returns the address its
        actors dial, its Reverb port (`port`; 0: a free one there) and a free
        all-reduce port there.

        Raises:
            ValueError: it cannot be placed, or cannot write `root_dir` there.
        """

    def close(self) -> None:
        """Releases every host and cluster this backend started (not the commands:
        the supervisor stops those first)."""
