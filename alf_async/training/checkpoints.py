"""What a run keeps in its root_dir: progress counters, checkpoints, the operative
config and, once training is complete, `result.json`.

Thread-safety: called from the trainer's (main) thread only.
"""

import json
import math
import os
import shutil
from typing import List, Optional

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from alf_async import events
from alf_async.runs import layout
from alf_async.training.evaluation import export_policy



class Counters(tf.Module):
    """Training progress that survives a restart (checkpointed).

    Attributes:
        iteration, env_steps: the learner's own counters.
        episodes: episodes finished.
        seconds: training seconds of the root_dir's runs, up to the last save.
        reached_env_steps, reached_seconds: where the average return first
            reached `train.report_return` (-1: not yet), so that a resumed run
            keeps the first crossing.
        recent_episodes, num_recent: the (return, length) of the episodes the
            average return covered at the last save (`keep_episodes`).
    """

    def __init__(self, learner, window: int = 100):
        super().__init__(name="counters")
        self.iteration = learner.train_step
        self.env_steps = learner.env_steps
        self.episodes = tf.Variable(0, dtype=tf.int64, name="episodes")
        self.seconds = tf.Variable(0.0, dtype=tf.float64, name="seconds")
        self.reached_env_steps = tf.Variable(-1, dtype=tf.int64, name="reached_env_steps")
        self.reached_seconds = tf.Variable(-1.0, dtype=tf.float64, name="reached_seconds")
        self.recent_episodes = tf.Variable(tf.zeros([window, 2], tf.float64),
                                           name="recent_episodes")
        self.num_recent = tf.Variable(0, dtype=tf.int64, name="num_recent")

    def keep_episodes(self, episodes: np.ndarray) -> None:
        """Keeps the newest `window` of `[n, 2]` (return, length) rows for the checkpoint."""
        window = self.recent_episodes.shape[0]
        episodes = np.asarray(episodes, np.float64).reshape(-1, 2)[-window:]
        padded = np.zeros(self.recent_episodes.shape, np.float64)
        padded[:len(episodes)] = episodes
        self.recent_episodes.assign(padded)
        self.num_recent.assign(len(episodes))

    def kept_episodes(self) -> np.ndarray:
        """The rows `keep_episodes` kept (restored with a checkpoint), oldest first."""
        return self.recent_episodes.numpy()[:int(self.num_recent)]


def checkpoint_manager(checkpoint: tf.train.Checkpoint, root_dir: str, worker: int,
                       max_to_keep: int) -> tf.train.CheckpointManager:
    """The chief's manager writes `root_dir/checkpoints`. Another worker of a
    multi-worker learner writes a scratch copy (every worker takes part in
    saving mirrored variables), deleted when training ends."""
    name = layout.CHECKPOINT_DIR if worker == 0 else f"worker{worker}_scratch"
    return tf.train.CheckpointManager(checkpoint, os.path.join(root_dir, name),
                                      max_to_keep=max_to_keep)


def saved_checkpoints(directory: str) -> List[str]:
    """The checkpoint prefixes (`.../ckpt-N`) in `directory`, newest first
    (`layout.checkpoints_in`)."""
    return [prefix for _, prefix in layout.checkpoints_in(directory)]


def unreadable(prefix: str) -> Optional[str]:
    """Why the checkpoint `prefix` cannot be read in full (torn, corrupt), else None."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError) as error:
        return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    return None


def restore(root_dir: str, checkpoint: tf.train.Checkpoint, counters: Counters) -> None:
    """Resumes from the chief's newest readable checkpoint, if any (every worker reads it).

    A checkpoint that cannot be read in full (torn by a kill mid-write,
    corrupted on disk) is passed over with one warning line, before any
    variable is touched.

    Raises:
        ValueError: checkpoints exist but none can be read: the run does not
            start from scratch silently.
    """
    saved = saved_checkpoints(os.path.join(root_dir, "checkpoints"))
    for prefix in saved:
        why = unreadable(prefix)
        if why is not None:
            logging.warning("Checkpoint %s cannot be read (%s): resuming from an older one",
                            prefix, why)
            continue
        checkpoint.restore(prefix).assert_existing_objects_matched()
        logging.info("Resumed from %s at iteration %d", prefix, int(counters.iteration))
        events.emit("resumed", iteration=int(counters.iteration),
                    env_steps=int(counters.env_steps))
        return
    if saved:
        raise ValueError(f"none of the {len(saved)} checkpoints in "
                         f"{os.path.join(root_dir, 'checkpoints')} can be read; move them "
                         f"away to start this root_dir afresh")


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (disk full, permissions); the previous one
    is intact."""


def save(manager: tf.train.CheckpointManager, counters: Counters) -> str:
    """Writes a checkpoint numbered by the iteration; returns its prefix.

    TensorFlow writes it under a temporary name and renames it when
    complete, so a failed write leaves the previous checkpoints as they were.

    Raises:
        CheckpointWriteError: the write failed (one line: the checkpoint and why).
    """
    iteration = int(counters.iteration)
    try:
        prefix = manager.save(checkpoint_number=iteration)
    except (OSError, tf.errors.OpError) as error:
        why = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise CheckpointWriteError(f"the checkpoint of iteration {iteration} could not be "
                                   f"written to {manager.directory}: {why}") from None
    events.emit("checkpointed", iteration=iteration, env_steps=int(counters.env_steps))
    return prefix


def save_and_export(manager: tf.train.CheckpointManager, counters: Counters, algorithm,
                    root_dir: str, worker: int, said_when_saved: str = "") -> None:
    """The final checkpoint; the chief exports the policy, other workers drop theirs.

    `said_when_saved` (a stop by signal's line) is logged as soon as the
    checkpoint is written, before the export: a supervisor's stop grace may
    end during the export, which then leaves the previous policy whole.

    Raises:
        CheckpointWriteError: the checkpoint could not be written.
    """
    save(manager, counters)
    if said_when_saved:
        logging.warning("%s", said_when_saved)
    if worker == 0:
        export_policy(algorithm, root_dir)
    else:
        shutil.rmtree(manager.directory, ignore_errors=True)


def write_config(root_dir: str) -> str:
    """Writes the operative gin config to `root_dir/operative_config.gin`; returns it."""
    config = gin.operative_config_str()
    layout.write_text(os.path.join(root_dir, "operative_config.gin"), config)
    return config


def finite(value):
    """JSON has no NaN: an unknown figure (no episode finished) is null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_result(root_dir: str, result: dict) -> None:
    """Writes the final metrics to `root_dir/result.json`, whole (strict JSON: NaN -> null)."""
    layout.write_text(os.path.join(root_dir, layout.RESULT_FILE),
                     json.dumps({key: finite(value) for key, value in result.items()},
                                indent=1, allow_nan=False))


