"""A search's trial workers, placed on a Ray cluster, sharing one Optuna study.

`python -m alf_async.tune --backend=ray --workers=N ...` starts N workers, each
the same `tune` command run on a node (`--backend=local --parallel=1`): every
worker takes trials from the study in the shared storage until it holds
`--trials` finished ones, and its lines are relayed to this console. A worker
that dies, or whose node is lost, is started again within `--worker_retries`
(one line each); the trial it was running stops beating, and the next worker
to take a trial marks it failed and queues its settings again (Optuna's
heartbeat, `study.RetryStaleTrial`). Ctrl-C stops every worker (each queues its
running trial's settings again) and exits 130.

Thread-safety: `run_workers` runs in the main thread (which receives the signals).
"""

import os
import sys
from typing import List, Sequence

from alf_async.runs.queue import Job, RunQueue
from alf_async.supervision.signals import SignalStop

_DRIVER_FLAGS = ("--backend", "--address", "--workers", "--worker_resources",
                 "--worker_retries", "--parallel", "--tf_threads", "--out")
STOP_GRACE_SECS = 150.0  # a stopped worker stops its trial's run (120 s) first


def worker_command(argv: Sequence[str], out_dir: str, tf_threads: int) -> List[str]:
    """The command of one worker: this `tune` command line (`argv`, flags as
    `--name=value`) run here, one trial at a time, its runs in `out_dir`."""
    kept = [arg for arg in argv[1:] if not arg.startswith(tuple(f + "=" for f in _DRIVER_FLAGS))
            and arg.lstrip("-") not in {f.lstrip("-") for f in _DRIVER_FLAGS}]
    return [sys.executable, "-m", "alf_async.tune", *kept, "--backend=local", "--parallel=1",
            f"--tf_threads={tf_threads}", f"--out={out_dir}", "--nosummary"]


def check_storage(storage: str, workers: int, nodes: int) -> None:
    """ValueError (one line) for a SQLite storage shared by workers that may run on
    more than one node (SQLite on a shared filesystem corrupts under writers on
    several hosts)."""
    if storage.startswith("sqlite") and workers > 1 and nodes > 1:
        raise ValueError(f"--storage={storage}: SQLite is for one host, and --workers="
                         f"{workers} may run on any of the Ray cluster's {nodes} nodes; "
                         f"use a database server (--storage=postgresql://...)")


def run_workers(placement, command: List[str], workers: int, out_dir: str,
                poll_secs: float = 1.0) -> int:
    """Runs `workers` copies of `command` where `placement` puts them until each ends
    (`runs.queue`, all at once); the exit status: 0 (every worker done), 1 (a trial
    failed, or a worker died past its retries), 128 + signum (stopped)."""
    jobs = [Job(f"worker_{i}", command, os.path.join(out_dir, "workers", f"worker_{i}"),
                relay=True) for i in range(workers)]
    queue = RunQueue(placement, workers, placement.retries, STOP_GRACE_SECS,
                     retry_when=lambda process: process.lost or process.returncode < 0,
                     on_retry=lambda job, process, retry: _restarting(
                         job, process, retry, placement.retries), poll_secs=poll_secs)
    with SignalStop("stopping every worker") as interrupt:
        codes = queue.run(jobs, lambda: interrupt.signum is not None)
        if interrupt.signum is not None:
            return 128 + interrupt.signum
    return 0 if all(code == 0 for code in codes.values()) else 1


def _restarting(job: Job, process, retry: int, budget: int) -> None:
    why = f"its node was lost ({process.lost})" if process.lost else \
        f"it died (exit {process.returncode})"
    print(f"tune: {job.name} on {process.address} ended, {why}; started again (retry "
          f"{retry} of {budget}); its trial is marked failed and queued again once its "
          f"heartbeat is overdue", flush=True)
