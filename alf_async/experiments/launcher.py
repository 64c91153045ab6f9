"""Runs the seeds of an experiment as ordinary training processes, P at a time.

Each seed runs through the one run queue (`runs.queue`) where its placement
puts it (`placement`: a subprocess here, or a Ray node; a seed whose node is
lost resumes on another, within its retry budget). Each seed is `python -m alf_async.train --root_dir=<cell>/seed_<S> ...` (a
chaos cell's: `python -m alf_async.chaos ...`): its own checkpoints,
TensorBoard events and `train.log`. A seed whose root_dir holds the
trainer's `result.json` (a chaos run's `ledger.json`) is done and skipped;
any other resumes from its checkpoint. SIGINT or SIGTERM to the launcher sends SIGTERM to every
child (each stops after its iteration and saves a checkpoint), waits for them
and kills what is left by PID; if the launcher dies, its children get SIGTERM
and, still alive a grace later, SIGKILL (`supervision.reaper`).
"""

import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional

from alf_async import events
from alf_async.experiments.cells import Cell
from alf_async.experiments.ledgers import LEDGER_FILE
from alf_async.supervision.placement import LocalPlacement
from alf_async.runs import layout
from alf_async.runs.commands import RUNNER_MODULES, runner_command, train_command
from alf_async.runs.queue import Job, RunQueue
from alf_async.tracking.settings import TrackerSettings
from alf_async.supervision.signals import SignalStop



@dataclasses.dataclass(frozen=True)
class SeedRun:
    """One training run: a cell's setting with one seed, in its own root_dir."""

    cell: Cell
    seed: int
    root_dir: str

    @property
    def name(self) -> str:
        return f"{self.cell.name}/seed_{self.seed}"

    def finished(self) -> bool:
        done = LEDGER_FILE if self.cell.runner == "chaos" else layout.RESULT_FILE
        return os.path.exists(os.path.join(self.root_dir, done))

    def command(self, tf_threads: int) -> List[str]:
        if self.cell.runner in RUNNER_MODULES:
            return runner_command(self.cell.runner, self.root_dir, self.cell.gin_files,
                                  self.cell.gin_bindings, self.seed, self.cell.runner_flags)
        return train_command(self.root_dir, self.cell.gin_files,
                             [*self.cell.gin_bindings, f"train.seed={self.seed}"],
                             tf_threads) + list(self.cell.runner_flags)


def seed_runs(cells: List[Cell], seeds: List[int], out_dir: str,
              new_cell: bool = False, save: bool = True) -> List[SeedRun]:
    """Every (cell, seed) run, its root_dir `out_dir/<cell>/seed_<S>`; saves the cells
    (`save`; else `save_cells` does, once the runs can start).

    Raises:
        ValueError: a cell's directory holds seeds made otherwise (unless
            `new_cell`: then the cell goes to a new directory beside it).
    """
    if new_cell:
        cells = [cell.renamed_to_fit(out_dir) for cell in cells]
    for cell in cells:  # every cell checked before any is written
        changed = cell.differences(os.path.join(out_dir, cell.name))
        if changed:
            raise ValueError(f"{os.path.join(out_dir, cell.name)} holds seeds made otherwise: "
                             f"{'; '.join(changed)}. Use another --out, or --new_cell")
    runs = [SeedRun(cell, s, os.path.join(out_dir, cell.name, f"seed_{s}"))
            for cell in cells for s in seeds]
    if save:
        save_cells(runs)
    return runs


def save_cells(runs: List[SeedRun]) -> None:
    """Records each run's cell in its cell's directory (`cell.json`)."""
    for run in runs:
        run.cell.save(os.path.dirname(run.root_dir))


def error_line(root_dir: str) -> str:
    """The one line a failed run ended with: its last typed 'failed' event (`train`
    records one for each failure it catches), else the last line of its `train.log`
    (a run that died before it could: a crash, a signal, a bad flag), less an
    absl error line's prefix."""
    failed = [e["error"] for e in events.read_events(root_dir) if e["event"] == "failed"]
    if failed:
        return failed[-1]
    try:
        with open(os.path.join(root_dir, layout.LOG_FILE), errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return "no log"
    line = lines[-1] if lines else "no output"
    return line.split("] ", 1)[-1] if line.startswith("E") and "] " in line else line


class Launcher:
    """Runs `SeedRun`s, at most `parallel` at a time (`runs.queue`), and reports progress.

    Thread-safety: `run()` is called once, from the main thread (which
    receives the signals).
    """

    def __init__(self, runs: List[SeedRun], parallel: int, tf_threads: Optional[int] = None,
                 grace_secs: float = 120.0, poll_secs: float = 0.5,
                 progress_secs: float = 30.0, echo: Callable[[str], None] = None,
                 tracker: TrackerSettings = TrackerSettings(), placement=None):
        """
        Args:
            runs: the seeds to run (finished ones are skipped).
            parallel: P, most training processes at once (0: the placement's
                room: one here, what a Ray cluster holds at the start).
            tf_threads: each child's `--tf_threads`; None: its share of the
                cores, `max(1, cores // P)`.
            grace_secs: how long stopped children may take to save their
                checkpoint before they are killed.
            poll_secs: how often children are checked.
            progress_secs: longest time between two progress lines.
            echo: where progress lines go.
            tracker: where each seed also reports: its cell is the group,
                `cell/seed_<S>` the run (a `pbt` seed's members:
                `cell/seed_<S>/member_<i>`).
            placement: where seeds run (`placement`; None: subprocesses here).
        """
        if parallel < 0:
            raise ValueError(f"--parallel must be >= 0, got {parallel}")
        placement = placement or LocalPlacement()
        self._runs = {r.name: r for r in runs if not r.finished()}
        self._skipped = len(runs) - len(self._runs)
        self._total = len(runs)
        self._parallel = placement.capacity(parallel)
        self._tf_threads = tf_threads or placement.tf_threads(self._parallel)
        self._queue = RunQueue(placement, self._parallel, placement.retries, grace_secs,
                               on_retry=self._retrying, on_end=self._ended,
                               poll_secs=poll_secs)
        self._progress_secs = progress_secs
        self._echo = echo or (lambda line: print(line, flush=True))
        self._tracker = tracker
        self.failed: Dict[str, str] = {}  # run name -> its error line
        self._durations: List[float] = []
        self._last_line, self._last_time = "", 0.0

    def run(self) -> Optional[int]:
        """Runs every pending seed; returns None, or the signal that stopped it."""
        if self._skipped:
            self._echo(f"{self._skipped} of {self._total} seeds already done: skipped")
        jobs = [Job(run.name, run.command(self._tf_threads) + self._tracker.flags(
            group=run.cell.name, name=run.name), run.root_dir) for run in self._runs.values()]
        with SignalStop() as interrupt:
            self._queue.run(jobs, lambda: interrupt.signum is not None, tick=self._report)
            if interrupt.signum is not None:
                self._echo(f"stopped {len(self._queue.stopped)} running seeds (checkpoints "
                           f"saved); run the same command again to resume")
            self._report(force=True)
            return interrupt.signum

    def _ended(self, job: Job, proc, started: float) -> None:
        """Counts a seed done, or says why it failed (one line)."""
        run, code = self._runs[job.name], proc.returncode
        if code == 0 and run.finished():
            self._durations.append(time.time() - started)
        elif proc.lost:
            losses = self._queue.retried(job.name) + 1
            self.failed[job.name] = f"its node was lost {losses} times"
            self._echo(f"{job.name} failed: its node was lost {losses} times "
                       f"(--seed_retries={self._queue.retries})")
        else:
            line = error_line(run.root_dir)
            self.failed[job.name] = f"exit {code}: {line}"
            self._echo(f"{job.name} failed (exit {code}): {line}")

    def _retrying(self, job: Job, proc, retry: int) -> None:
        self._echo(f"{job.name}: its node {proc.address} was lost ({proc.lost}); resuming "
                   f"from its checkpoint on another node (retry {retry} of "
                   f"{self._queue.retries})")

    def progress_line(self) -> str:
        done, running = self._skipped + len(self._durations), self._queue.running.values()
        pending = len(self._runs) - len(self._durations) - len(self.failed) - len(running)
        line = (f"seeds done {done}/{self._total}, running {len(running)}, "
                f"failed {len(self.failed)}")
        if self._durations and (pending or running):
            mean, now = sum(self._durations) / len(self._durations), time.time()
            work = pending * mean + sum(max(mean - (now - started), 0.0)
                                        for _, _, started in running)
            if work >= self._parallel:  # not once the seeds left outlast the mean
                line += f", ETA {work / self._parallel:.0f} s"
        return line

    def _report(self, force: bool = False) -> None:
        line, now = self.progress_line(), time.time()
        changed = line.split(", ETA")[0] != self._last_line.split(", ETA")[0]
        if changed or (not force and now - self._last_time >= self._progress_secs):
            self._echo(f"[{time.strftime('%H:%M:%S')}] {line}")
            self._last_line, self._last_time = line, now
