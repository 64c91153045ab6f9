"""What a run keeps in its root_dir: progress counters, checkpoints, the operative
config and, once training is complete, `result.json`.

Thread-safety: called from the trainer's (main) thread only.
"""

import json
import math
import os
import shutil
from typing import Optional

import gin
import tensorflow as tf
from absl import logging

from alf_async.evaluation import export_policy

RESULT_FILE = "result.json"  # a complete run's final metrics (alf_async.experiment skips it)


class Counters(tf.Module):
    """Training progress that survives a restart (checkpointed).

    Attributes:
        iteration, env_steps: the learner's own counters.
        episodes: episodes finished.
        seconds: training seconds of the root_dir's runs, up to the last save.
        reached_env_steps, reached_seconds: where the average return first
            reached `train.report_return` (-1: not yet), so that a resumed run
            keeps the first crossing.
    """

    def __init__(self, learner):
        super().__init__(name="counters")
        self.iteration = learner.train_step
        self.env_steps = learner.env_steps
        self.episodes = tf.Variable(0, dtype=tf.int64, name="episodes")
        self.seconds = tf.Variable(0.0, dtype=tf.float64, name="seconds")
        self.reached_env_steps = tf.Variable(-1, dtype=tf.int64, name="reached_env_steps")
        self.reached_seconds = tf.Variable(-1.0, dtype=tf.float64, name="reached_seconds")


def checkpoint_manager(checkpoint: tf.train.Checkpoint, root_dir: str, worker: int,
                       max_to_keep: int) -> tf.train.CheckpointManager:
    """The chief's manager writes `root_dir/checkpoints`. Another worker of a
    multi-worker learner writes a scratch copy (every worker takes part in
    saving mirrored variables), deleted when training ends."""
    name = "checkpoints" if worker == 0 else f"worker{worker}_scratch"
    return tf.train.CheckpointManager(checkpoint, os.path.join(root_dir, name),
                                      max_to_keep=max_to_keep)


def restore(root_dir: str, checkpoint: tf.train.Checkpoint, counters: Counters) -> None:
    """Resumes from the chief's latest checkpoint, if any (every worker reads it)."""
    latest = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Resumed from %s at iteration %d", latest, int(counters.iteration))


def save_and_export(manager: tf.train.CheckpointManager, counters: Counters, algorithm,
                    root_dir: str, worker: int) -> None:
    """The final checkpoint; the chief exports the policy, other workers drop theirs."""
    manager.save(checkpoint_number=counters.iteration)
    if worker == 0:
        export_policy(algorithm, root_dir)
    else:
        shutil.rmtree(manager.directory, ignore_errors=True)


def write_config(root_dir: str) -> str:
    """Writes the operative gin config to `root_dir/operative_config.gin`; returns it."""
    config = gin.operative_config_str()
    with open(os.path.join(root_dir, "operative_config.gin"), "w") as f:
        f.write(config)
    return config


def finite(value):
    """JSON has no NaN: an unknown figure (no episode finished) is null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_result(root_dir: str, result: dict) -> None:
    """Writes the final metrics to `root_dir/result.json` (strict JSON: NaN -> null)."""
    with open(os.path.join(root_dir, RESULT_FILE), "w") as f:
        json.dump({key: finite(value) for key, value in result.items()}, f, indent=1,
                  allow_nan=False)


def read_result(root_dir: str) -> Optional[dict]:
    """The final metrics of a complete run in `root_dir`, None if it has none."""
    try:
        with open(os.path.join(root_dir, RESULT_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
