"""The training loop: learner iterations until the budget is spent, and what runs
after each one (summaries, checkpoints, evaluation, the console line).

Thread-safety: everything here runs in the trainer's (main) thread.
"""

import collections
import dataclasses
import math
import time
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from alf_async import events
from alf_async.training import checkpoints
from alf_async.training.checkpoints import Counters
from alf_async.environments import create_environment
from alf_async.errors import DriverStopped
from alf_async.training.evaluation import GreedyPolicy, greedy_actions, run_episodes
from alf_async.training.settings import RunSettings
from alf_async.supervision.signals import SignalStop

HINT_REPEAT_SECS = 300.0  # a hint that still holds is repeated this seldom


class Timeline:
    """Wall time of the run's phases, logged as one line at the end.

    `tools/startup.py` reads that line to split the time to a result into
    building, compiling, the first iteration, training and the final save.
    """

    def __init__(self):
        self._last = time.perf_counter()
        self._phases = []

    def mark(self, phase: str, detail: str = "") -> None:
        """Ends `phase` now (it began at the previous mark)."""
        now = time.perf_counter()
        self._phases.append(f"{phase} {now - self._last:.2f} s{detail}")
        self._last = now

    def log(self) -> None:
        logging.info("Timeline: %s", ", ".join(self._phases))


@dataclasses.dataclass(frozen=True)
class Budget:
    """When training is done, counted from the very first run of a root_dir."""

    num_iterations: Optional[int]
    num_env_steps: Optional[int]
    stop_at_return: Optional[float]

    def __post_init__(self):
        if (self.num_iterations is None and self.num_env_steps is None and
                self.stop_at_return is None):
            raise ValueError("train needs num_iterations, num_env_steps or stop_at_return")

    def spent(self, iteration: int, env_steps: int, average_return: Optional[float]) -> bool:
        """Whether a run at this point is done (an unknown return never is)."""
        return ((self.num_iterations is not None and iteration >= self.num_iterations) or
                (self.num_env_steps is not None and env_steps >= self.num_env_steps) or
                (self.stop_at_return is not None and average_return is not None and
                 average_return >= self.stop_at_return))


class StopCondition:
    """The budget, or a signal; a multi-worker learner stops when any worker would
    (its updates are collective: every worker must run the same number)."""

    def __init__(self, counters: Counters, budget: Budget, interrupt: SignalStop,
                 all_workers_sum: Callable[[int], int]):
        self._counters, self._budget = counters, budget
        self._interrupt, self._all_workers_sum = interrupt, all_workers_sum

    @property
    def interrupted(self) -> bool:
        return self._interrupt.signum is not None

    def __call__(self, average_return: float) -> bool:
        here = self.interrupted or self._budget.spent(
            int(self._counters.iteration), int(self._counters.env_steps), average_return)
        return self._all_workers_sum(int(here)) > 0


class Progress:
    """Time, rates and the first crossing of `report_return`.

    Seconds count the training of every run of the root_dir (each from the
    end of its build); the crossing, once reached, is kept in the counters,
    so a resumed run never reports it again.
    """

    def __init__(self, counters: Counters, report_return: Optional[float],
                 eta_window_secs: float = 60.0):
        self._counters = counters
        self._start_time = time.time()
        self._seconds_before = float(counters.seconds)
        self._start_steps = int(counters.env_steps)
        self._last = {}  # what -> when it was last due
        self._report_return = report_return
        self._recent = collections.deque()  # (time, env steps) after the first iteration
        self._eta_window = eta_window_secs

    def elapsed(self) -> float:
        """Training seconds of this root_dir so far; `sync()` keeps them in the counters."""
        return self._seconds_before + time.time() - self._start_time

    def sync(self) -> None:
        self._counters.seconds.assign(self.elapsed())

    def mark_iteration(self) -> None:
        """Feeds the ETA with the rate over the last `eta_window_secs` (the first
        iteration traces and optimises the learner's update: it is left out)."""
        now = time.time()
        self._recent.append((now, int(self._counters.env_steps)))
        while len(self._recent) > 2 and now - self._recent[1][0] >= self._eta_window:
            self._recent.popleft()

    def eta(self, num_env_steps: Optional[int], stop_at_return: Optional[float] = None) -> str:
        """`' | ETA 12 s'` to the env-step budget (`' | ETA at most 12 s (or at return
        475)'` where reaching `stop_at_return` ends the run sooner), or '' before a rate
        is known."""
        if num_env_steps is None or len(self._recent) < 2:
            return ""
        (since, steps), (now, env_steps) = self._recent[0], self._recent[-1]
        rate = (env_steps - steps) / max(now - since, 1e-9)
        if rate <= 0:
            return ""
        seconds = f"{max(num_env_steps - env_steps, 0) / rate:.0f} s"
        if stop_at_return is None:
            return f" | ETA {seconds}"
        return f" | ETA at most {seconds} (or at return {stop_at_return:g})"

    def frames_per_sec(self) -> float:
        """Env steps per second of this run (not the earlier ones of a resumed root_dir)."""
        steps = int(self._counters.env_steps) - self._start_steps
        return steps / max(time.time() - self._start_time, 1e-9)

    def whole_run_frames_per_sec(self) -> float:
        """Env steps per training second of the root_dir, over every run that continued it."""
        return int(self._counters.env_steps) / max(self.elapsed(), 1e-9)

    def reached(self) -> Optional[float]:
        """Seconds to the first crossing of `report_return`, None if not reached."""
        seconds = float(self._counters.reached_seconds)
        return seconds if seconds >= 0 else None

    def check_target(self, average_return: float) -> None:
        if (self.reached() is None and self._report_return is not None and
                average_return >= self._report_return):
            env_steps = int(self._counters.env_steps)
            self._counters.reached_seconds.assign(self.elapsed())
            self._counters.reached_env_steps.assign(env_steps)
            logging.info("Average return reached %.1f after %.1f s and %d env steps",
                         self._report_return, self.reached(), env_steps)
            events.emit("reached_target", average_return=float(average_return),
                        env_steps=env_steps, seconds=self.reached())

    def due(self, interval_secs: float, what: str = "line") -> bool:
        """Whether `interval_secs` passed since `what` (a console line, a progress
        event) was last due; if so, it is due now."""
        now = time.time()
        if now - self._last.get(what, 0.0) < interval_secs:
            return False
        self._last[what] = now
        return True


# The stages of the console's "busy:" figures: (timing key, name). A stage that does not
# run here (the actor threads of an acting env thread, or of actor processes) is left out.
_BUSY_STAGES = (("env_busy", "env"), ("actor_busy", "actor"), ("busy", "learner"))


def busy_text(timings: dict) -> str:
    """`env 80%, actor 30%, learner 95%`: the share of time each stage that runs in
    this process worked."""
    return ", ".join(f"{name} {100 * timings[key]:.0f}%" for key, name in _BUSY_STAGES
                     if key in timings)


def emit_progress(counters: Counters, average_return: float) -> None:
    """The `progress` run event (what a supervisor and the chaos ledger follow)."""
    events.emit("progress", iteration=int(counters.iteration),
                env_steps=int(counters.env_steps),
                average_return=None if math.isnan(average_return) else float(average_return))


class ConsoleLine:
    """The progress line, and the starvation hint: once, then only every few minutes."""

    def __init__(self):
        self._hinted = -math.inf

    def log(self, counters: Counters, fps: float, score, learn_queue: int,
            timings: dict, eta: str) -> None:
        """`score`: the run's `scores` object (its label and last value are shown)."""
        returns = ("no score yet" if math.isnan(score.last) else
                   f"{score.label} {score.last:.1f}")
        busy = busy_text(timings)  # none before the first summary's timings
        logging.info("iteration %d | env steps %d | %.0f frames/s | %s | learn queue %d%s%s",
                     int(counters.iteration), int(counters.env_steps), fps, returns,
                     learn_queue, f" | busy: {busy}" if busy else "", eta)
        starved = timings.get("dequeue_wait_ms", 0.0) > timings.get("grad_ms", math.inf)
        if starved and time.time() - self._hinted >= HINT_REPEAT_SECS:
            self._hinted = time.time()
            logging.info("The learner waits for data longer than it trains: more env threads "
                         "(num_envs) or sub-envs (num_parallel_environments) would feed it "
                         "faster.")


def write_metrics(driver, loop, learner, counters: Counters, fps: float) -> dict:
    """Writes the summaries of the trainer's side; returns the stage timings."""
    average_return, average_length = driver.stats.averages()
    iteration, env_steps = counters.iteration, counters.env_steps
    tf.summary.scalar("Metrics/AverageReturn", average_return, step=iteration)
    for family, step in [("Metrics", iteration), ("Metrics_vs_EnvironmentSteps", env_steps)]:
        tf.summary.scalar(f"{family}/AverageEpisodeLength", average_length, step=step)
    tf.summary.scalar("Metrics/EnvironmentSteps", env_steps, step=iteration)
    tf.summary.scalar("Metrics/NumberOfEpisodes", counters.episodes, step=iteration)
    for env_id, value in enumerate(driver.stats.returns_by_env()):
        tf.summary.scalar(f"Metrics_by_env/AverageReturn_env{env_id}", value, step=env_steps)
    tf.summary.scalar("driver/env_frames_per_sec", fps, step=iteration)
    tf.summary.scalar("driver/learn_queue_size", driver.learn_queue_size(), step=iteration)
    tf.summary.scalar("learner/num_replicas", learner.strategy.num_replicas_in_sync,
                      step=iteration)
    tf.summary.scalar("learner/skipped_updates", learner.skipped_updates, step=iteration)
    for tag, value in driver.summaries().items():
        tf.summary.scalar(tag, value, step=iteration)
    timings = loop.clock.read_and_reset()
    busy = driver.busy_fractions()
    for family, values in [("learner", timings), ("driver", busy)]:
        for key, value in values.items():
            tf.summary.scalar(f"{family}/{key}", value, step=iteration)
    return dict(timings, **busy)


def evaluate(algorithm, iteration, num_episodes: int, seed: Optional[int]) -> float:
    """Greedy episodes on a separate env of `num_episodes` sub-envs, as `eval/*`;
    returns their average return."""
    env = create_environment(num_parallel_environments=num_episodes, num_workers=0,
                             seed=None if seed is None else seed - 1)
    average_return, average_length = run_episodes(
        greedy_actions(GreedyPolicy(algorithm), num_episodes), env, num_episodes)
    env.close()
    with tf.summary.record_if(True):
        tf.summary.scalar("eval/AverageReturn", average_return, step=iteration)
        tf.summary.scalar("eval/AverageEpisodeLength", average_length, step=iteration)
    logging.info("Evaluation at iteration %d: average return %.1f over %d greedy episodes",
                 int(iteration), average_return, num_episodes)
    return average_return


class Hooks:
    """What the trainer does after each iteration: summaries, checkpoints, evaluation,
    progress."""

    def __init__(self, algorithm, learner, driver, loop, counters: Counters,
                 manager: tf.train.CheckpointManager, progress: Progress,
                 settings: RunSettings, score, video=None):
        """`score`: the run's score (`scores.score_for`); `video`: an `EvalVideo`, told
        of each evaluation (None: no videos)."""
        self._algorithm, self._learner, self._driver, self._loop = (algorithm, learner,
                                                                    driver, loop)
        self._counters, self._manager, self._progress = counters, manager, progress
        self._settings, self._score, self._video = settings, score, video
        self._episodes_before = int(counters.episodes)
        self._failed_saves = 0  # in a row
        self._timings = {}
        self._console = ConsoleLine()

    def after_iteration(self) -> float:
        """Runs every hook that is due; returns the run's score (`scores`)."""
        counters, settings, progress = self._counters, self._settings, self._progress
        iteration = int(counters.iteration)
        counters.episodes.assign(self._episodes_before + self._driver.stats.num_episodes)
        progress.mark_iteration()
        if iteration % settings.summary_interval == 0:
            self._timings = self.write_metrics()
        if iteration % settings.checkpoint_interval == 0:
            self.save()
        score = self._score.after_iteration(self.evaluate_if_due(iteration))
        progress.check_target(score)
        if progress.due(settings.log_interval_secs, "line"):
            self._console.log(counters, progress.frames_per_sec(), self._score,
                              self._driver.learn_queue_size(), self._timings,
                              progress.eta(settings.num_env_steps, settings.stop_at_return))
        if progress.due(settings.progress_event_secs or settings.log_interval_secs, "event"):
            emit_progress(counters, score)
        return score

    def evaluate_if_due(self, iteration: int) -> Optional[float]:
        """The greedy evaluation (and its video) where one is due: its return, or None."""
        settings, counters = self._settings, self._counters
        if not settings.eval_interval or iteration % settings.eval_interval:
            return None
        evaluated = evaluate(self._algorithm, counters.iteration, settings.num_eval_episodes,
                             settings.seed)
        if self._video is not None:
            self._video.after_evaluation(self._algorithm, iteration // settings.eval_interval,
                                         counters.iteration, int(counters.env_steps))
        return evaluated

    def close(self, wait_secs: float = 0.0) -> None:
        """Ends the evaluation videos, showing one still being recorded if it is ready
        within `wait_secs`."""
        if self._video is not None:
            self._video.close(wait_secs)

    def save(self) -> None:
        """A checkpoint (the counters with this run's seconds), and what the driver keeps.

        A write that fails is logged in one line and tried again at the next
        interval, up to `checkpoint_retries` failures in a row.

        Raises:
            CheckpointWriteError: one failure more than `checkpoint_retries`.
        """
        self._progress.sync()
        self._counters.keep_episodes(self._driver.stats.recent())
        try:
            checkpoints.save(self._manager, self._counters)
        except checkpoints.CheckpointWriteError as error:
            self._failed_saves += 1
            if self._failed_saves > self._settings.checkpoint_retries:
                raise
            logging.error("%s; the previous checkpoint stays; retrying in %d iterations "
                          "(failure %d of train.checkpoint_retries=%d)", error,
                          self._settings.checkpoint_interval, self._failed_saves,
                          self._settings.checkpoint_retries)
            events.emit("checkpoint_failed", iteration=int(self._counters.iteration),
                        error=str(error))
            return
        self._failed_saves = 0
        self._driver.save()

    def write_metrics(self) -> dict:
        return write_metrics(self._driver, self._loop, self._learner, self._counters,
                             self._progress.frames_per_sec())


def iterate(loop, hooks: Hooks, done: StopCondition, timeline: Timeline) -> None:
    """Learner iterations until `done`; the compile-heavy first one is marked apart."""
    average_return, first = float("nan"), True
    while not done(average_return):
        try:
            loop.step()
        except DriverStopped:
            if done.interrupted:  # the signal stopped the driver while a batch was awaited
                return
            raise
        if first:
            timeline.mark("first iteration")
            first = False
        average_return = hooks.after_iteration()
