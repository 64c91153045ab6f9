"""One run queue: runs through a placement, P at a time, a lost one started again.

Experiment seeds, population members and search workers all run this way: a
`Job` is one command with its own `root_dir`; `RunQueue.run` starts at most P
of them at once where its placement puts them (a subprocess here, a Ray node),
starts again one that ended the way `retry_when` says (its node lost, by
default) within a budget of retries, each resuming from its checkpoint, and,
once `should_stop()` says so, stops every running one (`stop_runs`: SIGTERM,
each saves a checkpoint, SIGKILL after a grace) and starts no more.

A placement here is any object with `start(name, command, root_dir, relay)`
and `forget(process)`; a process one with `poll()`, `signal(signum)`,
`wait(timeout)`, `returncode` and `lost` (`supervision.backend.Process`).

Thread-safety: used from one thread (the main one, which receives the signals).
"""

import dataclasses
import signal
import time
from typing import Callable, Dict, List, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Job:
    """One run to place.

    Attributes:
        name: what lines call it (`cell/seed_3`, `member_1`, `worker_0`).
        command: its command line.
        root_dir: its folder (its output goes to `root_dir/train.log`).
        relay: its output to this process's console instead.
    """
    name: str
    command: List[str]
    root_dir: str
    relay: bool = False


def lost(process) -> bool:
    """The default `retry_when`: the run's node was lost (it did not fail itself)."""
    return bool(process.lost)


def stop_runs(processes: Sequence, grace_secs: float) -> None:
    """SIGTERM to every run (each saves a checkpoint), then SIGKILL to any still alive
    after `grace_secs`."""
    for process in processes:
        process.signal(signal.SIGTERM)
    deadline = time.time() + grace_secs
    for process in processes:
        if process.wait(max(deadline - time.time(), 0.1)) is None:
            process.signal(signal.SIGKILL)
            process.wait(30.0)


class RunQueue:
    """Runs `Job`s through a placement, at most `parallel` at a time."""

    def __init__(self, placement, parallel: int, retries: int, grace_secs: float,
                 retry_when: Callable[[object], bool] = lost,
                 on_retry: Optional[Callable[[Job, object, int], None]] = None,
                 on_end: Optional[Callable[[Job, object, float], None]] = None,
                 poll_secs: float = 0.2):
        """
        Args:
            placement: where the jobs run (see the module's docstring).
            parallel: P, most jobs running at once (>= 1).
            retries: times each job may be started again.
            grace_secs: how long stopped jobs may take to save before SIGKILL.
            retry_when: whether an ended job's process asks for another start.
            on_retry: `(job, process, retry)` before a job's retry number `retry`
                (1, 2, ...) starts, e.g. for its line.
            on_end: `(job, process, when it started)` once a job has ended for good
                (`time.time()`).
            poll_secs: how often the running jobs are checked.
        """
        self._placement, self._parallel, self.retries = placement, max(parallel, 1), retries
        self._grace, self._poll = grace_secs, poll_secs
        self._retry_when, self._on_retry, self._on_end = retry_when, on_retry, on_end
        self._retried: Dict[str, int] = {}  # a job's name: times it was started again
        self.running: Dict[str, tuple] = {}  # a job's name: (job, process, when it started)
        self.stopped: List[Job] = []  # the jobs `should_stop` stopped

    def retried(self, name: str) -> int:
        """How often the job `name` was started again."""
        return self._retried.get(name, 0)

    def run(self, jobs: Sequence[Job], should_stop: Callable[[], bool],
            tick: Callable[[], None] = lambda: None) -> Dict[str, int]:
        """Runs every job (`tick()` after each round, e.g. for progress lines); returns
        the exit status of each that ended for good (a stopped job's is absent)."""
        pending, codes = list(jobs), {}
        while (pending or self.running) and not should_stop():
            while pending and len(self.running) < self._parallel:
                self._start(pending.pop(0))
            tick()
            time.sleep(self._poll)
            for job, process, started in self._reap():
                if self._retry(job, process):
                    pending.insert(0, job)
                else:
                    codes[job.name] = process.returncode
                    if self._on_end:
                        self._on_end(job, process, started)
        if self.running and should_stop():
            self.stopped = [job for job, _, _ in self.running.values()]
            stop_runs([process for _, process, _ in self.running.values()], self._grace)
            self.running.clear()
        return codes

    def _start(self, job: Job) -> None:
        process = self._placement.start(job.name, job.command, job.root_dir, relay=job.relay)
        self.running[job.name] = (job, process, time.time())

    def _reap(self) -> List[tuple]:
        """`(job, process, when it started)` of each job whose process has ended (each
        let go of), in start order."""
        ended = []
        for name, (job, process, started) in list(self.running.items()):
            if process.poll() is not None:
                del self.running[name]
                self._placement.forget(process)
                ended.append((job, process, started))
        return ended

    def _retry(self, job: Job, process) -> bool:
        """Whether an ended job starts again (within its budget; `on_retry` if so)."""
        if not self._retry_when(process) or self.retried(job.name) >= self.retries:
            return False
        self._retried[job.name] = self.retried(job.name) + 1
        if self._on_retry:
            self._on_retry(job, process, self._retried[job.name])
        return True
