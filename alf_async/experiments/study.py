"""An Optuna study of training runs: create or resume it, run trials, print the best.

The study lives in an Optuna storage (a SQLite file or any RDB URL) with
heartbeats: a trial whose process died is marked failed and retried once by
the next process that opens the study.
"""

import dataclasses
import warnings
from typing import List, Optional

import optuna
from optuna.storages import RDBStorage, RetryFailedTrialCallback
from optuna.trial import TrialState

from alf_async.experiments import search
from alf_async.supervision.signals import SignalStop
from alf_async.tracking.settings import TrackerSettings

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """What `python -m alf_async.tune` was asked to do (see its flags)."""

    storage: str
    name: str
    out_dir: str
    gin_files: List[str]
    bindings: List[str]
    space_path: str
    trials: int
    parallel: int
    objective: str
    target: Optional[float]
    prune: bool
    startup_trials: int
    seed: Optional[int]
    tf_threads: int
    report_steps: int = 10_000
    tracker: TrackerSettings = TrackerSettings()  # where each trial also reports
    prune_after: int = 50_000
    heartbeat_secs: int = 30  # a running trial's worker beats this often
    grace_secs: int = 120  # a trial without a beat for this long is failed and retried
    summary: bool = True  # the study's counts and best trial printed at the end


class RetryStaleTrial:
    """Optuna's `failed_trial_callback`: a trial whose worker stopped beating (it died,
    or its node was lost) was marked failed; says so in one line and queues its
    settings to run again, once (`RetryFailedTrialCallback`)."""

    def __init__(self, grace_secs: int):
        self._grace = grace_secs
        self._retry = RetryFailedTrialCallback(max_retry=1)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        print(f"trial {trial.number}: no heartbeat from its worker for {self._grace} s (it "
              f"died, or its node was lost): marked failed, {self._what_next(trial)}",
              flush=True)
        self._retry(study, trial)

    @staticmethod
    def _what_next(trial: optuna.trial.FrozenTrial) -> str:
        if trial.system_attrs.get("retry_history"):
            return "not retried (it was a retry)"
        if not trial.params:  # its worker died between Optuna's ask and its suggestions
            return "before it drew its settings: a new trial takes its place"
        return "its settings queued to run again"


def open_study(settings: SearchSettings) -> optuna.Study:
    """Creates the study, or loads it with the trials it has.

    Raises:
        ValueError: the stored study optimises another objective direction.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own line per trial instead
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage = RDBStorage(settings.storage, heartbeat_interval=settings.heartbeat_secs,
                         grace_period=settings.grace_secs,
                         failed_trial_callback=RetryStaleTrial(settings.grace_secs))
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials,
                                          n_warmup_steps=settings.prune_after)
              if settings.prune else optuna.pruners.NopPruner())
    sampler = optuna.samplers.TPESampler(n_startup_trials=settings.startup_trials,
                                         seed=settings.seed)
    direction = search.OBJECTIVES[settings.objective]
    study = optuna.create_study(storage=storage, study_name=settings.name, sampler=sampler,
                                pruner=pruner, direction=direction, load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise ValueError(f"study {settings.name!r} in {settings.storage} was made to "
                         f"{study.direction.name.lower()}, but --objective="
                         f"{settings.objective} would {direction}: use another --study")
    for key, value in dict(gin_files=settings.gin_files, bindings=settings.bindings,
                           objective=settings.objective, target=settings.target).items():
        study.set_user_attr(key, value)
    return study


def bindings_of(trial: optuna.trial.FrozenTrial) -> List[str]:
    """A trial's sampled settings as `--gin_param=...` arguments."""
    return [f"--gin_param='{name}={value}'" for name, value in trial.params.items()]


def _describe(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """The one line printed when a trial ends."""
    value = "" if trial.value is None else f" value {trial.value:.6g}"
    if trial.state == TrialState.PRUNED and trial.intermediate_values:
        value = f" at {max(trial.intermediate_values):,} env steps"
    params = ", ".join(f"{k.rsplit('.', 1)[-1]}={v:.4g}" if isinstance(v, float) else
                       f"{k.rsplit('.', 1)[-1]}={v}" for k, v in trial.params.items())
    finished = len(study.get_trials(deepcopy=False, states=FINISHED))
    print(f"trial {trial.number} {trial.state.name.lower()}{value} | {params} "
          f"| {finished} finished", flush=True)


def holds_every_trial(settings: SearchSettings) -> bool:
    """Whether the study holds the `settings.trials` finished trials asked for."""
    finished = open_study(settings).get_trials(deepcopy=False, states=FINISHED)
    return len(finished) >= settings.trials


def print_best(study: optuna.Study, settings: SearchSettings) -> None:
    """The study's counts, its best trial's settings and how to re-run it."""
    counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,)))
              for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    print(f"study {settings.name!r}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    if not counts["complete"]:
        print("no complete trial yet")
        return
    best = study.best_trial
    print(f"best trial {best.number}: {settings.objective} {best.value:.6g} "
          f"({best.user_attrs.get('root_dir')})")
    print("  " + " ".join(bindings_of(best)))
    print(f"re-run it: python -m alf_async.experiment run --cell="
          f"{best.user_attrs.get('root_dir')} --seeds=1-5 --out=runs/best")
    print(f"optuna-dashboard {settings.storage}")


def run_search(settings: SearchSettings) -> int:
    """Runs trials until the study holds `settings.trials` finished ones; the exit status.

    0: done; 1: some trials of this process failed; 128 + signum: stopped by
    a signal (the trial that was running is queued to run again).
    """
    space = search.load_space(settings.space_path)
    study = open_study(settings)
    left = settings.trials - len(study.get_trials(deepcopy=False, states=FINISHED))
    failed = []
    with SignalStop() as interrupt:
        runner = search.TrialRunner(settings.out_dir, settings.gin_files, settings.bindings,
                                    space, settings.objective, settings.target,
                                    settings.tf_threads, lambda: interrupt.signum is not None,
                                    report_steps=settings.report_steps,
                                    tracker=settings.tracker)

        def on_end(study, trial):
            if trial.state == TrialState.FAIL:
                failed.append(trial.number)
            _describe(study, trial)

        if left > 0:
            try:
                study.optimize(runner, n_trials=left, n_jobs=settings.parallel,
                               catch=(search.TrialFailed,), callbacks=[
                                   # running ones count: other workers finish them
                                   optuna.study.MaxTrialsCallback(
                                       settings.trials, (*FINISHED, TrialState.RUNNING)),
                                   on_end])
            except search.Interrupted:
                print(f"stopped by {interrupt.signum}; run the same command again to resume",
                      flush=True)
                return 128 + interrupt.signum
    if settings.summary:
        print_best(study, settings)
    return 1 if failed else 0
