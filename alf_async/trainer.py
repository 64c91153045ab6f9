"""The training loop: driver + learner, summaries, checkpoints, progress."""

import functools
import json
import logging as std_logging
import math
import os
import shutil
import signal
import tempfile
import time
from typing import Callable, Optional, Sequence

import gin
import tensorflow as tf
from absl import logging

from alf_async import quiet
from alf_async.algorithms import PPOAlgorithm
from alf_async.devices import create_strategy, worker_index
from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.environments import create_environment
from alf_async.evaluation import GreedyPolicy, export_policy, greedy_actions, run_episodes
from alf_async.learner import Learner
from alf_async.learner_loop import LearnerLoop
from alf_async.remote import ReverbService
from alf_async.signals import SignalStop


def parse_config(gin_files: Sequence[str], bindings: Sequence[str]) -> None:
    """Parses gin files, then bindings; a file may `include` its neighbours by name."""
    for path in gin_files:
        gin.add_config_file_search_path(os.path.dirname(os.path.abspath(path)))
    # gin first looks an included name up as a Python package path and logs the miss
    # as an error before finding it on the search path: held back.
    with quiet.held_back("gin/resource_reader.py", below=std_logging.CRITICAL):
        gin.parse_config_files_and_bindings(list(gin_files), list(bindings))


def check_writable(root_dir: str) -> str:
    """Creates `root_dir` if needed; raises ValueError if it is not writable."""
    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    try:
        os.makedirs(root_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=root_dir):
            pass
    except OSError as error:
        raise ValueError(f"root_dir={root_dir!r} is not writable: {error.strerror}") from None
    return root_dir


class _Counters(tf.Module):
    """Training progress that survives a restart (checkpointed)."""

    def __init__(self, learner: Learner):
        super().__init__(name="counters")
        self.iteration = learner.train_step
        self.env_steps = learner.env_steps
        self.episodes = tf.Variable(0, dtype=tf.int64, name="episodes")


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped training; a checkpoint was written first."""

    def __init__(self, signum: int, iteration: int):
        super().__init__(f"Interrupted by {signal.Signals(signum).name} at iteration "
                         f"{iteration}; checkpoint saved")
        self.signum = signum


class _Timeline:
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


def _compile_detail(driver: AsyncOffPolicyDriver) -> str:
    return " (" + ", ".join(f"{name} {seconds:.2f} s"
                            for name, seconds in driver.compile_seconds.items()) + ")"


class _Progress:
    """Rates and the console line, measured from the start of this run."""

    def __init__(self, counters: _Counters, report_return: Optional[float]):
        self._counters = counters
        self._start_time = time.time()
        self._start_steps = int(counters.env_steps)
        self._last_log = 0.0
        self._report_return = report_return
        self.reached_at = None
        self._steady = None  # (time, env steps) at the end of the first iteration

    def mark_first_iteration(self) -> None:
        """The first iteration traces and optimises the learner's update: the ETA
        is computed from the rate after it."""
        self._steady = (time.time(), int(self._counters.env_steps))

    def eta(self, env_steps: int, num_env_steps: Optional[int]) -> str:
        """`' | ETA 12 s'`, or '' before the rate after the first iteration is known."""
        if num_env_steps is None or self._steady is None:
            return ""
        since, steps = self._steady
        rate = (env_steps - steps) / max(time.time() - since, 1e-9)
        if rate <= 0:
            return ""
        return f" | ETA {max(num_env_steps - env_steps, 0) / rate:.0f} s"

    def frames_per_sec(self, env_steps: int) -> float:
        return (env_steps - self._start_steps) / max(time.time() - self._start_time, 1e-9)

    def check_target(self, average_return: float, env_steps: int) -> None:
        if (self.reached_at is None and self._report_return is not None and
                average_return >= self._report_return):
            self.reached_at = time.time() - self._start_time
            logging.info("Average return reached %.1f after %.1f s and %d env steps",
                         self._report_return, self.reached_at, env_steps)

    def due(self, interval_secs: float) -> bool:
        now = time.time()
        if now - self._last_log < interval_secs:
            return False
        self._last_log = now
        return True


def _write_metrics(driver: AsyncOffPolicyDriver, loop: LearnerLoop, learner: Learner,
                   counters: _Counters, fps: float) -> dict:
    """Writes the summaries of the trainer's side; returns the stage timings."""
    average_return, average_length = driver.stats.averages()
    iteration, env_steps = counters.iteration, counters.env_steps
    for family, step in [("Metrics", iteration), ("Metrics_vs_EnvironmentSteps", env_steps)]:
        tf.summary.scalar(f"{family}/AverageReturn", average_return, step=step)
        tf.summary.scalar(f"{family}/AverageEpisodeLength", average_length, step=step)
    tf.summary.scalar("Metrics/EnvironmentSteps", env_steps, step=iteration)
    tf.summary.scalar("Metrics/NumberOfEpisodes", counters.episodes, step=iteration)
    tf.summary.scalar("driver/env_frames_per_sec", fps, step=iteration)
    tf.summary.scalar("driver/learn_queue_size", driver.learn_queue_size(), step=iteration)
    tf.summary.scalar("learner/num_replicas", learner.strategy.num_replicas_in_sync,
                      step=iteration)
    tf.summary.scalar("learner/skipped_updates", learner.skipped_updates, step=iteration)
    for tag, value in driver.summaries().items():
        tf.summary.scalar(tag, value, step=iteration)
    timings = loop.clock.read_and_reset()
    for key, value in timings.items():
        tf.summary.scalar(f"learner/{key}", value, step=iteration)
    busy = driver.busy_fractions()
    for key, value in busy.items():
        tf.summary.scalar(f"driver/{key}", value, step=iteration)
    return dict(timings, **busy)


def _evaluate(algorithm, iteration, num_episodes: int, seed: Optional[int]) -> None:
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


def _log_progress(counters: _Counters, fps: float, average_return: float, learn_queue: int,
                  timings: dict, eta: str) -> None:
    returns = ("no episode finished yet" if math.isnan(average_return) else
               f"average return {average_return:.1f}")
    logging.info("iteration %d | env steps %d | %.0f frames/s | %s | "
                 "learn queue %d | busy: env %.0f%%, actor %.0f%%, learner %.0f%%%s",
                 int(counters.iteration), int(counters.env_steps), fps, returns,
                 learn_queue, 100 * timings.get("env_busy", 0.0),
                 100 * timings.get("actor_busy", 0.0), 100 * timings.get("busy", 0.0), eta)
    if timings.get("dequeue_wait_ms", 0.0) > timings.get("grad_ms", float("inf")):
        logging.info("The learner waits for data longer than it trains: more env threads "
                     "(num_envs) or sub-envs (num_parallel_environments) would feed it faster.")


def build(algorithm_class: Callable = PPOAlgorithm, seed: Optional[int] = None,
          serve_port: Optional[int] = None, replay_dir: Optional[str] = None):
    """Builds the algorithm, learner, driver and learner loop from the gin configuration.

    Every size rule is checked here, before any thread starts. With
    `serve_port`, the driver takes its unrolls from actor processes through a
    `ReverbService` listening there (0: a free port). `replay_dir`: where a
    uniform replay buffer is saved if `UniformReplay.save_buffer` (a worker
    of a multi-worker learner other than the chief adds `_worker<i>` to it).

    Returns:
        `(algorithm, learner, driver, loop)`; the driver is not started.
    """
    strategy = create_strategy()  # first: a multi-worker strategy must precede other ops
    worker = worker_index(strategy)
    if seed is not None:
        tf.random.set_seed(seed)
        seed += 1_000_000 * worker  # each worker's envs their own
    if replay_dir and worker:
        replay_dir = f"{replay_dir}_worker{worker}"  # each worker's buffer its own
    env_factory = lambda i: create_environment(seed=None if seed is None else seed + 1000 * i)
    probe = env_factory(0)
    with strategy.scope():
        algorithm = algorithm_class(probe.time_step_spec(), probe.action_spec())
    probe.close()
    learner = Learner(algorithm, strategy, seed=seed)
    remote = None
    if serve_port is not None:
        remote = functools.partial(ReverbService, variables=algorithm.variables,
                                   version=learner.train_step, port=serve_port)
    driver = AsyncOffPolicyDriver(env_factory, algorithm, learner.train_step, seed=seed,
                                  remote=remote, replay_dir=replay_dir)
    learner.check_batch_shape(*driver.learn_batch_shape)
    loop = LearnerLoop(learner, driver.feed)
    driver.attach(loop)  # run_async() (ALF's name) runs the loop
    if driver.deterministic:
        # Kernels too must reduce in a fixed order (matters on GPUs).
        tf.config.experimental.enable_op_determinism()
    return algorithm, learner, driver, loop


class _StopCondition:
    """When training is done: iterations, env steps, a return, or a signal."""

    def __init__(self, counters: _Counters, num_iterations: Optional[int],
                 num_env_steps: Optional[int], stop_at_return: Optional[float],
                 interrupt: SignalStop, all_workers_sum: Callable[[int], int]):
        """`all_workers_sum`: a multi-worker learner stops when any worker would
        (its updates are collective: every worker must run the same number)."""
        if num_iterations is None and num_env_steps is None and stop_at_return is None:
            raise ValueError("train needs num_iterations, num_env_steps or stop_at_return")
        self._counters = counters
        self._num_iterations = num_iterations
        self._num_env_steps = num_env_steps
        self._stop_at_return = stop_at_return
        self._interrupt = interrupt
        self._all_workers_sum = all_workers_sum

    def __call__(self, average_return: float) -> bool:
        return self._all_workers_sum(int(self._here(average_return))) > 0

    def _here(self, average_return: float) -> bool:
        counters = self._counters
        return (self._interrupt.signum is not None or
                (self._num_iterations is not None and
                 counters.iteration >= self._num_iterations) or
                (self._num_env_steps is not None and counters.env_steps >= self._num_env_steps) or
                (self._stop_at_return is not None and average_return >= self._stop_at_return))


def _checkpoint_manager(checkpoint: tf.train.Checkpoint, root_dir: str, worker: int,
                        max_to_keep: int) -> tf.train.CheckpointManager:
    """The chief's manager writes `root_dir/checkpoints`. Another worker of a
    multi-worker learner writes a scratch copy (every worker takes part in
    saving mirrored variables), deleted when training ends."""
    name = "checkpoints" if worker == 0 else f"worker{worker}_scratch"
    return tf.train.CheckpointManager(checkpoint, os.path.join(root_dir, name),
                                      max_to_keep=max_to_keep)


def _restore(root_dir: str, checkpoint: tf.train.Checkpoint, counters: _Counters) -> None:
    """Resumes from the chief's latest checkpoint, if any (every worker reads it)."""
    latest = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Resumed from %s at iteration %d", latest, int(counters.iteration))


def _write_config(root_dir: str) -> str:
    """Writes the operative gin config to `root_dir/operative_config.gin`; returns it."""
    config = gin.operative_config_str()
    with open(os.path.join(root_dir, "operative_config.gin"), "w") as f:
        f.write(config)
    return config


def _log_start(algorithm, learner: Learner, driver: AsyncOffPolicyDriver) -> None:
    logging.info("Training %s: %s, %d learner replica(s) on %s", type(algorithm).__name__,
                 driver.describe(), learner.strategy.num_replicas_in_sync,
                 ", ".join(learner.devices))


class _Hooks:
    """What the trainer does after each iteration: summaries, checkpoints, evaluation, progress."""

    def __init__(self, algorithm, learner: Learner, driver: AsyncOffPolicyDriver,
                 loop: LearnerLoop, counters: _Counters, manager: tf.train.CheckpointManager,
                 progress: _Progress, settings: dict):
        self._algorithm, self._learner, self._driver, self._loop = (algorithm, learner,
                                                                    driver, loop)
        self._counters, self._manager, self._progress = counters, manager, progress
        self._settings = settings
        self._episodes_before = int(counters.episodes)
        self._timings = {}

    def after_iteration(self) -> float:
        """Runs every hook that is due; returns the average return."""
        counters, settings = self._counters, self._settings
        iteration = int(counters.iteration)
        counters.episodes.assign(self._episodes_before + self._driver.stats.num_episodes)
        fps = self._progress.frames_per_sec(int(counters.env_steps))
        average_return = self._driver.stats.averages()[0]
        self._progress.check_target(average_return, int(counters.env_steps))
        if iteration % settings["summary_interval"] == 0:
            self._timings = self.write_metrics()
        if iteration % settings["checkpoint_interval"] == 0:
            self._manager.save(checkpoint_number=counters.iteration)
            self._driver.save()
        if settings["eval_interval"] and iteration % settings["eval_interval"] == 0:
            _evaluate(self._algorithm, counters.iteration, settings["num_eval_episodes"],
                      settings["seed"])
        if self._progress.due(settings["log_interval_secs"]):
            _log_progress(counters, fps, average_return, self._driver.learn_queue_size(),
                          self._timings, self._progress.eta(int(counters.env_steps),
                                                            settings["num_env_steps"]))
        return average_return

    def write_metrics(self) -> dict:
        return _write_metrics(self._driver, self._loop, self._learner, self._counters,
                              self._progress.frames_per_sec(int(self._counters.env_steps)))


def _result(driver: AsyncOffPolicyDriver, learner: Learner, counters: _Counters,
            progress: _Progress) -> dict:
    return dict(iteration=int(counters.iteration), env_steps=int(counters.env_steps),
                episodes=int(counters.episodes), average_return=driver.stats.averages()[0],
                frames_per_sec=progress.frames_per_sec(int(counters.env_steps)),
                seconds_to_report_return=progress.reached_at,
                optimizer_steps=int(learner.optimizer.iterations.numpy()),
                learning_rate=float(learner.optimizer.learning_rate.numpy()))


def _write_result(root_dir: str, result: dict) -> None:
    """Writes the final metrics to `root_dir/result.json`: the run is complete
    (`alf_async.experiment` skips runs that have one)."""
    with open(os.path.join(root_dir, "result.json"), "w") as f:
        json.dump(result, f, indent=1)


def _iterate(loop: LearnerLoop, hooks: _Hooks, done: _StopCondition,
             timeline: _Timeline, progress: _Progress) -> None:
    """Learner iterations until `done`; the compile-heavy first one is marked apart."""
    average_return, first = float("nan"), True
    while not done(average_return):
        loop.step()
        if first:
            timeline.mark("first iteration")
            progress.mark_first_iteration()
            first = False
        average_return = hooks.after_iteration()


def _save_and_export(manager, counters: _Counters, algorithm, root_dir: str,
                     worker: int) -> None:
    """The final checkpoint; the chief exports the policy, other workers drop theirs."""
    manager.save(checkpoint_number=counters.iteration)
    if worker == 0:
        export_policy(algorithm, root_dir)
    else:
        shutil.rmtree(manager.directory, ignore_errors=True)


@gin.configurable(module="alf_async")
def train(root_dir: str,
          algorithm_class: Callable = PPOAlgorithm,
          num_iterations: Optional[int] = None,
          num_env_steps: Optional[int] = 1_000_000,
          stop_at_return: Optional[float] = None,
          report_return: Optional[float] = 475.0,
          seed: Optional[int] = None,
          summary_interval: int = 10,
          checkpoint_interval: int = 100,
          max_checkpoints: int = 3,
          log_interval_secs: float = 5.0,
          eval_interval: int = 0,
          num_eval_episodes: int = 10,
          serve_port: Optional[int] = None) -> dict:
    """Trains `algorithm_class` with an `AsyncOffPolicyDriver` until done.

    Re-running with the same `root_dir` resumes from its latest checkpoint;
    the stopping conditions count from the very first run. A run that ends
    without a signal writes its final metrics to `root_dir/result.json`.

    Args:
        root_dir: where summaries (`train/`), checkpoints and the operative
            gin config go.
        algorithm_class: `fn(time_step_spec, action_spec)` -> algorithm.
        num_iterations: stop after this many learner iterations (None: no limit).
        num_env_steps: stop after this many env steps (None: no limit).
        stop_at_return: stop once the average return reaches it (None: never).
        report_return: log when the average return first reaches it.
        seed: global seed for TensorFlow and the envs (None: random).
        summary_interval: iterations between summaries.
        checkpoint_interval: iterations between checkpoints.
        max_checkpoints: checkpoints kept on disk.
        log_interval_secs: seconds between console progress lines.
        eval_interval: iterations between greedy evaluations (0: none).
        num_eval_episodes: episodes per evaluation, played in parallel on a
            separate env.
        serve_port: collect with actor processes (`python -m alf_async.actor
            --server=THIS_HOST:PORT`) through a Reverb server on this port
            (0: a free one) instead of env threads here (None).

    Returns:
        Final metrics: iteration, env_steps, episodes, average_return,
        frames_per_sec, seconds_to_report_return (None if not reached),
        optimizer_steps and learning_rate.
    """
    root_dir = check_writable(root_dir)
    with SignalStop() as interrupt:  # from here on: a signal during start-up stops cleanly too
        timeline = _Timeline()
        algorithm, learner, driver, loop = build(algorithm_class, seed, serve_port,
                                                 os.path.join(root_dir, "replay"))
        worker = worker_index(learner.strategy)  # 0: the chief, which writes everything
        counters = _Counters(learner)
        done = _StopCondition(counters, num_iterations, num_env_steps, stop_at_return, interrupt,
                              learner.all_workers_sum)
        checkpoint = tf.train.Checkpoint(algorithm=algorithm, learner=learner, counters=counters)
        manager = _checkpoint_manager(checkpoint, root_dir, worker, max_checkpoints)
        _restore(root_dir, checkpoint, counters)
        config = _write_config(root_dir) if worker == 0 else gin.operative_config_str()
        writer = (tf.summary.create_file_writer(os.path.join(root_dir, "train")) if worker == 0
                  else tf.summary.create_noop_writer())
        progress = _Progress(counters, report_return)
        hooks = _Hooks(algorithm, learner, driver, loop, counters, manager, progress, dict(
            summary_interval=summary_interval, checkpoint_interval=checkpoint_interval,
            eval_interval=eval_interval if worker == 0 else 0,
            num_eval_episodes=num_eval_episodes, seed=seed,
            log_interval_secs=log_interval_secs, num_env_steps=num_env_steps))
        _log_start(algorithm, learner, driver)
        timeline.mark("build")
        driver.start()
        timeline.mark("compile", _compile_detail(driver))
        try:
            with writer.as_default(), tf.summary.record_if(
                    lambda: tf.equal(learner.train_step % summary_interval, 0)):
                tf.summary.text("config/operative_gin", config, step=counters.iteration)
                _iterate(loop, hooks, done, timeline, progress)
                with tf.summary.record_if(True):  # the final state, whatever the interval
                    hooks.write_metrics()
        finally:
            driver.stop()
        timeline.mark("training")
        _save_and_export(manager, counters, algorithm, root_dir, worker)
        writer.flush()
        timeline.mark("checkpoint and export")
        timeline.log()
        result = _result(driver, learner, counters, progress)
        if interrupt.signum is not None:
            raise TrainingInterrupted(interrupt.signum, result["iteration"])
        if worker == 0:
            _write_result(root_dir, result)
    logging.info("Training done: %s", result)
    return result
