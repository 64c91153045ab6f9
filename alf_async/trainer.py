"""The training loop: driver + learner, summaries, checkpoints, progress."""

import os
import tempfile
import time
from typing import Callable, Optional

import gin
import tensorflow as tf
from absl import logging

from alf_async.algorithms import PPOAlgorithm
from alf_async.devices import create_strategy
from alf_async.drivers import AsyncOffPolicyDriver
from alf_async.environments import create_environment
from alf_async.learner import Learner


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


class _Progress:
    """Rates and the console line, measured from the start of this run."""

    def __init__(self, counters: _Counters, report_return: Optional[float]):
        self._start_time = time.time()
        self._start_steps = int(counters.env_steps)
        self._last_log = 0.0
        self._report_return = report_return
        self.reached_at = None

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


def _write_metrics(driver: AsyncOffPolicyDriver, counters: _Counters, fps: float) -> None:
    average_return, average_length = driver.stats.averages()
    iteration, env_steps = counters.iteration, counters.env_steps
    for family, step in [("Metrics", iteration), ("Metrics_vs_EnvironmentSteps", env_steps)]:
        tf.summary.scalar(f"{family}/AverageReturn", average_return, step=step)
        tf.summary.scalar(f"{family}/AverageEpisodeLength", average_length, step=step)
    tf.summary.scalar("Metrics/EnvironmentSteps", env_steps, step=iteration)
    tf.summary.scalar("Metrics/NumberOfEpisodes", counters.episodes, step=iteration)
    tf.summary.scalar("driver/env_frames_per_sec", fps, step=iteration)
    tf.summary.scalar("driver/learn_queue_size", driver.learn_queue_size(), step=iteration)


def build(algorithm_class: Callable = PPOAlgorithm, seed: Optional[int] = None):
    """Builds the algorithm, learner and driver from the gin configuration.

    Every size rule is checked here, before any thread starts.

    Returns:
        `(algorithm, learner, driver)`; the driver is not started.
    """
    if seed is not None:
        tf.random.set_seed(seed)
    env_factory = lambda i: create_environment(seed=None if seed is None else seed + 1000 * i)
    probe = env_factory(0)
    strategy = create_strategy()
    with strategy.scope():
        algorithm = algorithm_class(probe.time_step_spec(), probe.action_spec())
    probe.close()
    learner = Learner(algorithm, strategy)
    driver = AsyncOffPolicyDriver(env_factory, algorithm, learner)
    learner.check_batch_shape(driver.learn_queue_cap, driver.unroll_length, driver.batch_size)
    return algorithm, learner, driver


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
          log_interval_secs: float = 5.0) -> dict:
    """Trains `algorithm_class` with an `AsyncOffPolicyDriver` until done.

    Re-running with the same `root_dir` resumes from its latest checkpoint;
    the stopping conditions count from the very first run.

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

    Returns:
        Final metrics: iteration, env_steps, episodes, average_return,
        frames_per_sec and seconds_to_report_return (None if not reached).
    """
    root_dir = check_writable(root_dir)
    if num_iterations is None and num_env_steps is None and stop_at_return is None:
        raise ValueError("train needs num_iterations, num_env_steps or stop_at_return")
    algorithm, learner, driver = build(algorithm_class, seed)
    counters = _Counters(learner)
    checkpoint = tf.train.Checkpoint(algorithm=algorithm, learner=learner, counters=counters)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(root_dir, "checkpoints"),
                                         max_to_keep=max_checkpoints)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        logging.info("Resumed from %s at iteration %d", manager.latest_checkpoint,
                     int(counters.iteration))
    config = gin.operative_config_str()
    with open(os.path.join(root_dir, "operative_config.gin"), "w") as f:
        f.write(config)
    writer = tf.summary.create_file_writer(os.path.join(root_dir, "train"))
    progress = _Progress(counters, report_return)
    episodes_before = int(counters.episodes)

    def done() -> bool:
        return ((num_iterations is not None and counters.iteration >= num_iterations) or
                (num_env_steps is not None and counters.env_steps >= num_env_steps) or
                (stop_at_return is not None and driver.stats.averages()[0] >= stop_at_return))

    driver.start()
    try:
        with writer.as_default(), tf.summary.record_if(
                lambda: tf.equal(learner.train_step % summary_interval, 0)):
            tf.summary.text("config/operative_gin", config, step=counters.iteration)
            while not done():
                driver.run_async()
                counters.episodes.assign(episodes_before + driver.stats.num_episodes)
                fps = progress.frames_per_sec(int(counters.env_steps))
                average_return = driver.stats.averages()[0]
                progress.check_target(average_return, int(counters.env_steps))
                if int(counters.iteration) % summary_interval == 0:
                    _write_metrics(driver, counters, fps)
                if int(counters.iteration) % checkpoint_interval == 0:
                    manager.save(checkpoint_number=counters.iteration)
                if progress.due(log_interval_secs):
                    logging.info(
                        "iteration %d | env steps %d | %.0f frames/s | average return %.1f | "
                        "learn queue %d", int(counters.iteration), int(counters.env_steps), fps,
                        average_return, driver.learn_queue_size())
            _write_metrics(driver, counters, progress.frames_per_sec(int(counters.env_steps)))
    finally:
        driver.stop()
    manager.save(checkpoint_number=counters.iteration)
    writer.flush()
    result = dict(iteration=int(counters.iteration), env_steps=int(counters.env_steps),
                  episodes=int(counters.episodes), average_return=driver.stats.averages()[0],
                  frames_per_sec=progress.frames_per_sec(int(counters.env_steps)),
                  seconds_to_report_return=progress.reached_at)
    logging.info("Training done: %s", result)
    return result
