"""Runs the seeds of an experiment as ordinary training processes, P at a time.

Each seed runs where its placement puts it (`placement`: a subprocess here,
or a Ray node; a seed whose node is lost resumes on another, within its
retry budget). Each seed is `python -m alf_async.train --root_dir=<cell>/seed_<S> ...` (a
chaos cell's: `python -m alf_async.chaos ...`): its own checkpoints,
TensorBoard events and `train.log`. A seed whose root_dir holds the
trainer's `result.json` (a chaos run's `ledger.json`) is done and skipped;
any other resumes from its checkpoint. SIGINT or SIGTERM to the launcher sends SIGTERM to every
child (each stops after its iteration and saves a checkpoint), waits for them
and kills what is left by PID; children also get SIGTERM if the launcher dies
(Linux parent-death signal).
"""

import dataclasses
import os
import sys
import time
from typing import Callable, Dict, List, Optional

from alf_async import events
from alf_async.experiments.cells import Cell
from alf_async.experiments.ledgers import LEDGER_FILE
from alf_async.experiments.placement import LOG_FILE, LocalPlacement, stop_runs
from alf_async.runs import layout
from alf_async.tracking.settings import TrackerSettings
from alf_async.training.signals import SignalStop



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


# The runners other than `train`: the module whose command trains one seed, with
# `--root_dir`, `--gin_file`, `--gin_param`, `--seed` and the cell's runner flags.
RUNNER_MODULES = {"chaos": "alf_async.chaos", "pbt": "alf_async.pbt"}


def runner_command(runner: str, root_dir: str, gin_files, bindings, seed: int,
                   runner_flags) -> List[str]:
    """The command line of one seed of a `chaos` cell (a supervised launch with faults)
    or a `pbt` cell (a population); their processes' threads: TensorFlow's choice."""
    return [sys.executable, "-m", RUNNER_MODULES[runner], f"--root_dir={root_dir}",
            *[f"--gin_file={f}" for f in gin_files], *[f"--gin_param={b}" for b in bindings],
            f"--seed={seed}", *runner_flags]


def train_command(root_dir: str, gin_files, bindings, tf_threads: int) -> List[str]:
    """The `python -m alf_async.train` command line of one run."""
    return [sys.executable, "-m", "alf_async.train", f"--root_dir={root_dir}",
            *[f"--gin_file={f}" for f in gin_files], *[f"--gin_param={b}" for b in bindings],
            f"--tf_threads={tf_threads}"]


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
        with open(os.path.join(root_dir, LOG_FILE), errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return "no log"
    line = lines[-1] if lines else "no output"
    return line.split("] ", 1)[-1] if line.startswith("E") and "] " in line else line


@dataclasses.dataclass
class _Running:
    run: SeedRun
    proc: object  # a `backend.Process`
    started: float


class Launcher:
    """Runs `SeedRun`s, at most `parallel` at a time, and reports progress.

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
        self._placement = placement or LocalPlacement()
        self._pending = [r for r in runs if not r.finished()]
        self._skipped = len(runs) - len(self._pending)
        self._total = len(runs)
        self._parallel = self._placement.capacity(parallel)
        self._tf_threads = tf_threads or self._placement.tf_threads(self._parallel)
        self._retries: Dict[str, int] = {}  # run name: times it was started again
        self._grace, self._poll, self._progress_secs = grace_secs, poll_secs, progress_secs
        self._echo = echo or (lambda line: print(line, flush=True))
        self._tracker = tracker
        self._running: List[_Running] = []
        self.failed: Dict[str, str] = {}  # run name -> its error line
        self._durations: List[float] = []
        self._last_line, self._last_time = "", 0.0

    def run(self) -> Optional[int]:
        """Runs every pending seed; returns None, or the signal that stopped it."""
        if self._skipped:
            self._echo(f"{self._skipped} of {self._total} seeds already done: skipped")
        with SignalStop() as interrupt:
            while (self._pending or self._running) and interrupt.signum is None:
                self._reap()
                while self._pending and len(self._running) < self._parallel:
                    self._launch(self._pending.pop(0))
                self._report()
                time.sleep(self._poll)
            if interrupt.signum is not None:
                self._stop_all()
            self._report(force=True)
            return interrupt.signum

    def _launch(self, run: SeedRun) -> None:
        tracked = self._tracker.flags(group=run.cell.name, name=run.name)
        proc = self._placement.start(run.name, run.command(self._tf_threads) + tracked,
                                     run.root_dir)
        self._running.append(_Running(run, proc, time.time()))

    def _reap(self) -> None:
        for entry in list(self._running):
            code = entry.proc.poll()
            if code is None:
                continue
            self._running.remove(entry)
            self._placement.forget(entry.proc)
            if code == 0 and entry.run.finished():
                self._durations.append(time.time() - entry.started)
            elif entry.proc.lost:
                if self._retry(entry):
                    self._launch(entry.run)
            else:
                line = error_line(entry.run.root_dir)
                self.failed[entry.run.name] = f"exit {code}: {line}"
                self._echo(f"{entry.run.name} failed (exit {code}): {line}")

    def _retry(self, entry: _Running) -> bool:
        """Whether a seed whose node was lost runs again (one line says so), within its
        budget of retries."""
        name, budget = entry.run.name, self._placement.retries
        self._retries[name] = self._retries.get(name, 0) + 1
        if self._retries[name] > budget:
            self.failed[name] = f"its node was lost {self._retries[name]} times"
            self._echo(f"{name} failed: its node was lost {self._retries[name]} times "
                       f"(--seed_retries={budget})")
            return False
        self._echo(f"{name}: its node {entry.proc.address} was lost ({entry.proc.lost}); "
                   f"resuming from its checkpoint on another node (retry "
                   f"{self._retries[name]} of {budget})")
        return True

    def _stop_all(self) -> None:
        stop_runs([entry.proc for entry in self._running], self._grace)
        self._echo(f"stopped {len(self._running)} running seeds (checkpoints saved); "
                   f"run the same command again to resume")
        self._running.clear()

    def progress_line(self) -> str:
        done = self._skipped + len(self._durations)
        line = (f"seeds done {done}/{self._total}, running {len(self._running)}, "
                f"failed {len(self.failed)}")
        if self._durations and (self._pending or self._running):
            mean, now = sum(self._durations) / len(self._durations), time.time()
            work = len(self._pending) * mean + sum(max(mean - (now - r.started), 0.0)
                                                   for r in self._running)
            if work >= self._parallel:  # not once the seeds left outlast the mean
                line += f", ETA {work / self._parallel:.0f} s"
        return line

    def _report(self, force: bool = False) -> None:
        line, now = self.progress_line(), time.time()
        changed = line.split(", ETA")[0] != self._last_line.split(", ETA")[0]
        if changed or (not force and now - self._last_time >= self._progress_secs):
            self._echo(f"[{time.strftime('%H:%M:%S')}] {line}")
            self._last_line, self._last_time = line, now
