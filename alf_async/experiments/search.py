"""Hyper-parameter search with Optuna: search spaces, objectives and one trial's run.

A search space is a YAML file mapping gin bindings to ranges::

    alf_async.Learner.learning_rate: {low: 3.0e-4, high: 3.0e-3, log: true}  # float
    alf_async.Learner.num_epochs: {low: 1, high: 8, step: 1}                 # int
    AsyncOffPolicyDriver.learn_queue_cap: {choices: [2, 4]}                  # one of

A trial is one ordinary training run in its own root_dir. While it runs, the
trial reads the average returns the trainer writes to TensorBoard, reports
them to Optuna and stops the run (SIGTERM, checkpoint saved) if the pruner
says so.
"""

import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import optuna
import yaml

from alf_async.experiments import cells, launcher
from alf_async.runs import commands
from alf_async.runs.curves import Curve, load_curve
from alf_async.supervision.placement import LocalPlacement
from alf_async.runs import layout
from alf_async.runs.queue import stop_runs
from alf_async.tracking.settings import TrackerSettings

OBJECTIVES = {  # name -> study direction
    "auc": "maximize",              # mean average return over the run's env steps
    "final": "maximize",            # the last average return
    "steps_to_target": "minimize",  # env steps to the target (with a penalty if missed)
    "seconds_to_target": "minimize",  # seconds of training to the target (the same penalty)
}


def _number(binding: str, key: str, value):
    """YAML reads `3e-4` as a string (it wants `3.0e-4`): accept both."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"search space {binding}: {key} must be a number, got {value!r}")
    try:
        return value if isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ValueError(f"search space {binding}: {key} must be a number, "
                         f"got {value!r}") from None


def _gin_text(value) -> str:
    """A YAML choice as gin text: strings quoted, lists as tuples."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_gin_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _check_range(binding: str, spec: Dict) -> Dict:
    unknown = set(spec) - {"low", "high", "log", "step"}
    if unknown or not {"low", "high"} <= set(spec):
        raise ValueError(f"search space {binding}: give {{low, high[, log][, step]}} or "
                         f"{{choices: [...]}}, got {spec}")
    low, high = _number(binding, "low", spec["low"]), _number(binding, "high", spec["high"])
    if not low < high:
        raise ValueError(f"search space {binding}: low must be < high, got {low} and {high}")
    is_int = isinstance(low, int) and isinstance(high, int)  # `1`, not `1.0`
    return dict(kind="int" if is_int else "float", low=low, high=high,
                log=bool(spec.get("log", False)), step=spec.get("step"))


def parse_space(text: str) -> Dict[str, Dict]:
    """The search space of a YAML text: binding -> `{kind, ...}`.

    Raises:
        ValueError: not a mapping of bindings to ranges or choices, naming the entry.
    """
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not data:
        raise ValueError("the search space must map gin bindings to ranges or choices")
    space = {}
    for binding, spec in data.items():
        if not isinstance(spec, dict):
            raise ValueError(f"search space {binding}: expected a mapping, got {spec!r}")
        if "choices" in spec:
            if set(spec) != {"choices"} or not spec["choices"]:
                raise ValueError(f"search space {binding}: choices must be a non-empty list "
                                 f"alone, got {spec}")
            space[binding] = dict(kind="choice", choices=[_gin_text(c) for c in spec["choices"]])
        else:
            space[binding] = _check_range(binding, spec)
    return space


def load_space(path: str) -> Dict[str, Dict]:
    """`parse_space` of a file (ValueError naming it if it is missing)."""
    if not os.path.exists(path):
        raise ValueError(f"--space={path} does not exist")
    with open(path) as f:
        return parse_space(f.read())


def suggest(trial: optuna.Trial, space: Dict[str, Dict]) -> List[str]:
    """The trial's gin bindings, one sampled value per entry of `space`."""
    bindings = []
    for binding, spec in space.items():
        if spec["kind"] == "choice":
            value = trial.suggest_categorical(binding, spec["choices"])
        elif spec["kind"] == "int":
            value = trial.suggest_int(binding, spec["low"], spec["high"], step=spec["step"] or 1,
                                      log=spec["log"])
        else:
            value = trial.suggest_float(binding, spec["low"], spec["high"], log=spec["log"],
                                        step=spec["step"])
        bindings.append(f"{binding}={value}")
    return bindings


def objective_value(curve: Curve, objective: str, target: Optional[float]) -> float:
    """The objective of a finished run's curve.

    `steps_to_target` (or `seconds_to_target`) of a run that missed the
    target: its env steps (seconds) times `2 - best / target`, so closer
    misses rank better than far ones. Seconds count from the run's first
    summary event: compiling and the first iteration are in them.
    """
    steps, value = curve["env_steps"].astype(np.float64), curve["value"]
    if objective == "final":
        return float(value[-1])
    if objective == "auc":
        if len(value) < 2:
            return float(value[-1])
        return float(np.trapz(value, steps) / max(steps[-1] - steps[0], 1.0))
    spent = curve["seconds"] if objective == "seconds_to_target" else steps
    reached = np.flatnonzero(value >= target)
    if len(reached):
        return float(spent[reached[0]])
    return float(spent[-1] * (2.0 - max(value.max(), 0.0) / target))


class TrialFailed(Exception):
    """A trial's training run failed (its error line is the message)."""


class Interrupted(Exception):
    """The search was stopped by a signal while a trial ran."""


def _try_curve(root_dir: str) -> Optional[Curve]:
    try:
        curve = load_curve(root_dir)
    except ValueError:
        return None  # no summary yet
    return curve if len(curve["value"]) else None


class TrialRunner:
    """Runs one trial as a training process, reporting its curve to Optuna.

    Thread-safety: one `TrialRunner` per study; `__call__` may run in several
    threads at once (Optuna's `n_jobs`), each for its own trial.
    """

    def __init__(self, out_dir: str, gin_files: List[str], bindings: List[str],
                 space: Dict[str, Dict], objective: str, target: Optional[float],
                 tf_threads: int, should_stop: Callable[[], bool], report_steps: int = 10_000,
                 poll_secs: float = 2.0, grace_secs: float = 120.0,
                 tracker: TrackerSettings = TrackerSettings()):
        """
        Args:
            out_dir: trial n runs in `out_dir/trial_<n>`.
            gin_files: the gin files every trial trains with.
            bindings: the gin bindings every trial shares.
            space: `parse_space`'s result.
            objective: a key of `OBJECTIVES`.
            target: the return of the `steps_to_target` objective.
            tf_threads: each trial's `--tf_threads`.
            should_stop: true once the search must stop (a signal).
            report_steps: the pruner compares trials at multiples of this
                many env steps (trials with different batch sizes align).
            poll_secs: how often the run's event files are read.
            grace_secs: how long a stopped run may take to save its checkpoint.
            tracker: where each trial also reports: the study is the group,
                `<study>/trial_<n>` the run.
        """
        self._out_dir, self._gin_files, self._bindings = out_dir, gin_files, bindings
        self._space, self._objective, self._target = space, objective, target
        self._tf_threads, self._should_stop = tf_threads, should_stop
        self._report_steps, self._poll, self._grace = report_steps, poll_secs, grace_secs
        self._tracker = tracker

    def __call__(self, trial: optuna.Trial) -> float:
        root_dir = os.path.join(self._out_dir, f"trial_{trial.number}")
        trial.set_user_attr("root_dir", root_dir)
        bindings = [*self._bindings, *suggest(trial, self._space)]
        self._check_stop(trial, None)
        cell = cells.make_cells(self._gin_files, bindings, [], self._target)[0]
        dataclasses.replace(cell, name=f"trial_{trial.number}").save(root_dir)
        study = trial.study.study_name
        proc = LocalPlacement().start(trial.number, commands.train_command(
            root_dir, self._gin_files, bindings, self._tf_threads)
            + self._tracker.flags(group=study, name=f"{study}/trial_{trial.number}"), root_dir)
        reported = 0
        while proc.poll() is None:
            time.sleep(self._poll)
            self._check_stop(trial, proc)
            curve = _try_curve(root_dir)
            if curve is not None:
                reported = self._report(trial, curve, reported)
                if reported and trial.should_prune():
                    stop_runs([proc], self._grace)
                    raise optuna.TrialPruned(f"pruned at {reported:,} env steps")
        return self._finish(trial, proc.returncode, root_dir, reported)

    def _check_stop(self, trial: optuna.Trial, proc) -> None:
        """After a signal: stops the run and queues its settings to run again."""
        if not self._should_stop():
            return
        if proc is not None:
            stop_runs([proc], self._grace)
        trial.study.enqueue_trial(trial.params, user_attrs=dict(retry_of=trial.number))
        raise Interrupted(f"trial {trial.number} stopped")

    def _report(self, trial: optuna.Trial, curve: Curve, reported: int) -> int:
        """Reports the return at every multiple of `report_steps` passed since
        `reported` (negated when minimising); returns the last step reported."""
        sign = -1.0 if OBJECTIVES[self._objective] == "minimize" else 1.0
        step = reported + self._report_steps
        while step <= curve["env_steps"][-1]:
            latest = np.flatnonzero(curve["env_steps"] <= step)
            if len(latest):
                trial.report(sign * float(curve["value"][latest[-1]]), step)
            reported, step = step, step + self._report_steps
        return reported

    def _finish(self, trial: optuna.Trial, returncode: int, root_dir: str,
                reported: int) -> float:
        """The objective of a run that ended; its last points are reported first."""
        if returncode != 0 or not os.path.exists(os.path.join(root_dir, layout.RESULT_FILE)):
            raise TrialFailed(launcher.error_line(root_dir))
        curve = _try_curve(root_dir)
        if curve is None:
            raise TrialFailed("the run finished no episode")
        self._report(trial, curve, reported)
        return objective_value(curve, self._objective, self._target)
