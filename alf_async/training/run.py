"""`train`: assembles a run, resumes it, loops until its budget is spent, saves it.

The pieces live apart: `settings` holds the run's typed records, `assembly`
reads them from gin and builds, `loop.iterate` iterates and runs the hooks,
`checkpoints` keeps what survives a restart.
"""

import dataclasses
import os
import signal
from typing import NamedTuple, Optional

import tensorflow as tf
from absl import logging

from alf_async import events
from alf_async.runs import layout
from alf_async.supervision import promotion
from alf_async.training import checkpoints

from alf_async.training.assembly import build, run_settings
from alf_async.training.settings import RunSettings, Settings, write_settings
from alf_async.config import (applied_values, check_writable, parsed_bindings,
                              parsed_gin_files, run_tags)
from alf_async.learning.devices import worker_index
from alf_async.training.scores import score_for
from alf_async.supervision.signals import SignalStop
from alf_async.training.videos import EvalVideo
from alf_async.training.loop import (Budget, Hooks, Progress, StopCondition, Timeline,
                                     iterate)


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped training; a checkpoint was written first (and its
    message logged then), unless `saved` is False (the write failed: its error
    was logged, and the previous checkpoint stays)."""

    def __init__(self, signum: int, iteration: int, saved: bool = True):
        super().__init__(f"Interrupted by {signal.Signals(signum).name} at iteration "
                         f"{iteration}; " + ("checkpoint saved" if saved else
                                             "its checkpoint could not be written"))
        self.signum, self.iteration, self.saved = signum, iteration, saved


def _save_and_export(manager, counters, algorithm, root_dir: str, worker: int,
                     stopped: Optional[TrainingInterrupted]) -> None:
    """The final checkpoint and export. A stop by signal whose checkpoint cannot be
    written still ends as one (raises `TrainingInterrupted`, not the write's
    error): the signal ended the run, and a supervisor restarts it at once from
    the previous checkpoint instead of backing off as from a crash."""
    try:
        checkpoints.save_and_export(manager, counters, algorithm, root_dir, worker,
                                    said_when_saved=str(stopped or ""))
    except checkpoints.CheckpointWriteError as error:
        if not stopped:
            raise
        logging.error("%s", error)
        raise TrainingInterrupted(stopped.signum, stopped.iteration, saved=False) from error


def _finished(root_dir: str, budget: Budget) -> Optional[dict]:
    """The result of a run in `root_dir` that already spent `budget`, else None."""
    result = layout.read_result(root_dir)
    if result is None or not budget.spent(result["iteration"], result["env_steps"],
                                          result["average_return"]):
        return None
    logging.info("%s already finished training at iteration %d (%d env steps): %s kept; "
                 "raise train.num_env_steps or train.num_iterations to continue it",
                 root_dir, result["iteration"], result["env_steps"], layout.RESULT_FILE)
    return result


def _build_touches_the_run(settings: Settings) -> bool:
    """Whether building reads the run's state (a replay buffer kept on disk,
    `ReplaySettings.keeps_state`; a dataset it records into) or binds a port (a
    multi-worker learner's, from `TF_CONFIG`): a warm spare then builds only once
    promoted."""
    return (bool(os.environ.get("TF_CONFIG")) or settings.replay.keeps_state
            or bool(settings.run.record_dataset))


def _build(settings: Settings, root_dir: str, timeline: Timeline):
    """`build()`; in a warm spare (`alf_async.supervision.spare`), ahead of its promotion where it
    can, with the update compiled and run once (`Learner.warm_up`).

    Nothing of the run's state is read before the promotion: the checkpoint
    is restored and the Reverb port bound after it.
    """
    if _build_touches_the_run(settings):
        promotion.await_promotion()
    provenance = dict(run_tags(root_dir, parsed_gin_files()),
                      run_settings=settings.to_json())
    built = build(settings, root_dir, provenance)
    if promotion.pending():
        timeline.mark("build ahead")
        _, learner, driver, _ = built
        learner.warm_up(driver.example_batch())
        timeline.mark("update warmed up")
        logging.info("Warm spare ready (built, update warmed up); waiting for its promotion")
        promotion.await_promotion()
        timeline.mark("wait for the promotion")
    else:  # not a spare, or one promoted while it built: it becomes the command now
        promotion.await_promotion()
    return built


# How long the end of a run waits for an evaluation video still being recorded.
VIDEO_WAIT_SECS = 60.0


def _start(algorithm, learner, driver, timeline: Timeline) -> None:
    """Compiles the learner's update, then starts the driver: TensorFlow's
    optimising the update in its first run overlaps the first collection."""
    logging.info("Training %s: %s, %d learner replica(s) on %s", type(algorithm).__name__,
                 driver.describe(), learner.strategy.num_replicas_in_sync,
                 ", ".join(learner.devices))
    learner.trace(driver.example_batch())
    timeline.mark("update compiled")
    driver.start()


def _result(score, learner, counters: checkpoints.Counters, progress: Progress) -> dict:
    """The final metrics; `average_return` is the score's curve's last point."""
    reached = int(counters.reached_env_steps)
    return dict(iteration=int(counters.iteration), env_steps=int(counters.env_steps),
                episodes=int(counters.episodes),
                average_return=checkpoints.finite(score.last), score=score.tag,
                frames_per_sec=progress.whole_run_frames_per_sec(), seconds=progress.elapsed(),
                seconds_to_report_return=progress.reached(),
                env_steps_to_report_return=reached if reached >= 0 else None,
                optimizer_steps=int(learner.optimizer.iterations.numpy()),
                learning_rate=float(learner.optimizer.learning_rate.numpy()))


def _train_loop(learner, driver, loop, hooks: Hooks, done: StopCondition, config: str,
                timeline: Timeline, summary_interval: int) -> None:
    """Iterates under the summary writer's interval; stops the driver whatever happens
    (and the evaluation videos where an error ends the loop)."""
    try:
        with tf.summary.record_if(lambda: tf.equal(learner.train_step % summary_interval, 0)):
            tf.summary.text("config/operative_gin", config, step=learner.train_step)
            iterate(loop, hooks, done, timeline)
            with tf.summary.record_if(True):  # the final state, whatever the interval
                hooks.write_metrics()
    except BaseException:
        hooks.close()
        raise
    finally:
        driver.stop()


def train(root_dir: str, settings: Optional[RunSettings] = None) -> dict:
    """Trains `settings.algorithm_class` with an `AsyncOffPolicyDriver` until done.

    Re-running with the same `root_dir` resumes from its latest checkpoint;
    the budget counts from the very first run, and a run that already spent
    it says so and returns its `result.json` untouched. A run that ends
    without a signal writes its final metrics to `root_dir/result.json`.

    Args:
        root_dir: where summaries (`train/`), checkpoints, the operative gin
            config and `run_settings.json` (every settings record) go.
        settings: the run's algorithm, budget, seed and intervals (None:
            gin's `train.*` bindings). The other records (the driver's sizes,
            replay, env) come from gin through `assembly.run_settings`.

    Returns:
        Final metrics: iteration, env_steps, episodes, average_return (the
        run's final score, the last point of its `score` curve: the tag of
        `training.scores`; None before any), frames_per_sec and seconds (of the whole root_dir,
        over every run that continued it),
        seconds_to_report_return and env_steps_to_report_return (None if not
        reached), optimizer_steps and learning_rate.
    """
    root_dir = check_writable(root_dir)
    records = run_settings(settings)
    settings = records.run
    budget = Budget(settings.num_iterations, settings.num_env_steps, settings.stop_at_return)
    finished = _finished(root_dir, budget)
    if finished is not None:
        return finished
    with SignalStop() as interrupt:  # from here on: a signal during start-up stops cleanly too
        timeline = Timeline()
        algorithm, learner, driver, loop = _build(records, root_dir, timeline)
        finished = _finished(root_dir, budget)  # a warm spare's run may be over
        if finished is not None:
            driver.stop()
            return finished
        run = _resume(records, root_dir, algorithm, learner, driver, loop)
        timeline.mark("build")
        _start(algorithm, learner, driver, timeline)
        interrupt.call_on_signal(driver.request_stop)  # ends a wait for data at once
        timeline.mark("compile", " (" + ", ".join(
            f"{name} {seconds:.2f} s" for name, seconds in driver.compile_seconds.items()) + ")")
        with run.writer.as_default():
            done = StopCondition(run.counters, budget, interrupt, learner.all_workers_sum)
            _train_loop(learner, driver, loop, run.hooks, done, run.config, timeline,
                        settings.summary_interval)
        timeline.mark("training")
        result = _finish(run, algorithm, learner, root_dir, interrupt, timeline)
    logging.info("Training done: %s", result)
    return result


class _Resumed(NamedTuple):
    """A built run restored from its latest checkpoint, with what its loop writes to."""
    counters: checkpoints.Counters
    manager: tf.train.CheckpointManager
    progress: Progress
    hooks: Hooks
    writer: object  # a tf.summary writer
    config: str  # the operative gin config
    worker: int  # 0: the chief, which writes everything
    score: object  # the run's `scores` object


def _resume(records: Settings, root_dir: str, algorithm, learner, driver, loop) -> _Resumed:
    """Restores the latest checkpoint (if any) and records the run's settings."""
    settings = records.run
    worker = worker_index(learner.strategy)
    counters = checkpoints.Counters(learner, driver.stats.window)
    checkpoint = tf.train.Checkpoint(algorithm=algorithm, learner=learner, counters=counters)
    manager = checkpoints.checkpoint_manager(checkpoint, root_dir, worker,
                                             settings.max_checkpoints)
    checkpoints.restore(root_dir, checkpoint, counters)
    _report_settings(learner, counters)
    driver.stats.resume(counters.kept_episodes())
    config = ""
    if worker == 0:
        config = checkpoints.write_config(root_dir)
        write_settings(root_dir, records)
    writer = (tf.summary.create_file_writer(os.path.join(root_dir, "train")) if worker == 0
              else tf.summary.create_noop_writer())
    progress = Progress(counters, settings.report_return)
    score = score_for(driver, counters)
    video = (EvalVideo(root_dir, config, records.env.env_name, settings.eval_video_interval,
                       settings.seed) if settings.eval_video_interval and worker == 0 else None)
    hooks = Hooks(algorithm, learner, driver, loop, counters, manager, progress,
                  settings if worker == 0 else dataclasses.replace(settings, eval_interval=0),
                  score, video)
    return _Resumed(counters, manager, progress, hooks, writer, config, worker, score)


def _report_settings(learner, counters: checkpoints.Counters) -> None:
    """Puts the configured schedules of the mutable settings back after a restore (which
    wrote the checkpoint's values into their variables), then reports the values the
    run trains with: a `trains_with` run event and one log line. Those its learner
    holds in variables are read back from them; every other number a `--gin_param`
    binding set is the value gin really passed (`config.applied_values`)."""
    learner.mutable.follow()
    values = {**applied_values(parsed_bindings()), **learner.mutable.trains_with()}
    events.emit("trains_with", iteration=int(counters.iteration),
                env_steps=int(counters.env_steps), settings=values,
                weights=learner.mutable.weights_digest())
    logging.info("Trains with %s", ", ".join(f"{name} {value:.4g}"
                                             for name, value in sorted(values.items())))


def _finish(run: _Resumed, algorithm, learner, root_dir: str, interrupt,
            timeline: Timeline) -> dict:
    """Saves and exports the run; returns its result (written to result.json unless
    a signal stopped it: then raises `TrainingInterrupted`)."""
    run.progress.sync()
    run.counters.keep_episodes(run.score.episodes())
    stopped = interrupt.signum and TrainingInterrupted(interrupt.signum,
                                                       int(run.counters.iteration))
    _save_and_export(run.manager, run.counters, algorithm, root_dir, run.worker, stopped)
    events.emit("weights_saved", iteration=int(run.counters.iteration),
                env_steps=int(run.counters.env_steps), weights=learner.mutable.weights_digest())
    run.writer.flush()
    timeline.mark("checkpoint and export")
    timeline.log()
    result = _result(run.score, learner, run.counters, run.progress)
    with run.writer.as_default():  # after the run's seconds: a video still being recorded
        run.hooks.close(wait_secs=0.0 if stopped else VIDEO_WAIT_SECS)
    run.writer.flush()
    if stopped:
        raise stopped
    if run.worker == 0:
        checkpoints.write_result(root_dir, result)
    return result
