"""Trains an agent as its gin config says, in this process (or as the learner of
actor processes with --serve_port), with checkpoints and TensorBoard summaries in
--root_dir; re-running with the same --root_dir resumes.

    python -m alf_async.train --gin_file=gin_configs/ppo_async.gin --root_dir=runs/ppo \\
        --gin_param='AsyncOffPolicyDriver.learn_queue_cap=4'

The flags and the files they name are checked before TensorFlow is imported:
a bad one ends the command in one line with exit status 2.
"""

import json
import os
import shutil
import sys
import time
from typing import Optional

from absl import flags, logging

from alf_async import config, events
from alf_async.tracking import settings as tracker_settings
from alf_async.training.gc_policy import exits_fast, imports_uncollected

flags.DEFINE_string("root_dir", None, "Directory for summaries, checkpoints and config.")
flags.DEFINE_multi_string("gin_file", [], "Gin config file(s), applied in order "
                          "(one of gin_configs/*.gin first).")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings, e.g. 'train.seed=1', applied last.")
flags.DEFINE_integer("serve_port", None, "Collect with actor processes (python -m "
                     "alf_async.actor) through a Reverb server on this port (0: any free "
                     "port) instead of env threads in this process.")
flags.DEFINE_integer("tf_threads", 0, "Threads in each of TensorFlow's two op pools (intra-op "
                     "and inter-op); 0: TensorFlow's choice, all cores. 1 lets several runs "
                     "share the cores side by side without oversubscribing them.")
flags.DEFINE_string("tf_config", None, "A worker of a multi-worker learner: TF_CONFIG's "
                    "JSON (the cluster's workers and this one's index), set as TF_CONFIG "
                    "before TensorFlow starts; the launch's --learner_workers passes it.")
flags.DEFINE_bool("list_configs", False, "Print every shipped config (gin_configs/*.gin) with "
                  "its header's first line and the extras it needs, and exit.")
tracker_settings.define_flags()
FLAGS = flags.FLAGS

# In a warm spare (`alf_async.supervision.spare`), `run()` builds and warms the learner up
# ahead of the promotion, and waits for it before it touches the run's state.
RUNS_AHEAD = True


def warm_up() -> float:
    """Imports TensorFlow and the trainer (seconds, with the collector off:
    `alf_async.training.gc_policy`); returns the seconds it took."""
    start = time.perf_counter()
    with imports_uncollected():
        from alf_async.training import run as _  # noqa: F401  pylint: disable=import-outside-toplevel
    return time.perf_counter() - start


def _first_line(error: BaseException) -> str:
    """The error's own first line (gin appends the configurable it passed through)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _check_flags() -> None:
    """Raises ValueError naming a bad flag; runs before any heavy import."""
    if not FLAGS.root_dir:
        raise ValueError("--root_dir is required: the run's folder for checkpoints and "
                         "summaries (an existing one resumes)")
    tracker_settings.from_flags().check(
        contact=not tracker_settings.reported_before(FLAGS.root_dir))
    config.check_gin_files(FLAGS.gin_file, required=True)
    if FLAGS.tf_threads < 0:
        raise ValueError(f"--tf_threads must be >= 0, got {FLAGS.tf_threads}")
    if FLAGS.tf_config is not None:
        config.check_tf_config(FLAGS.tf_config)


def _set_tf_threads(threads: int) -> None:
    """Sizes TensorFlow's op thread pools; must run before TensorFlow executes anything."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        logging.info("TensorFlow op threads: %d intra-op, %d inter-op",
                     tf.config.threading.get_intra_op_parallelism_threads(),
                     tf.config.threading.get_inter_op_parallelism_threads())


def _list_configs() -> None:
    for path in config.shipped_configs():
        print(config.config_summary(path))


def main(argv) -> None:
    del argv
    if FLAGS.list_configs:
        _list_configs()
        return
    config.exit_on_bad_flags(_check_flags)
    if FLAGS.tf_config is not None:
        os.environ["TF_CONFIG"] = FLAGS.tf_config  # read when the strategy is made
    seconds = warm_up()
    if seconds >= 0.01:  # a warm spare imported ahead: nothing to report
        logging.info("Imports: %.2f s", seconds)
    _set_tf_threads(FLAGS.tf_threads)
    try:
        config.parse_config(FLAGS.gin_file, FLAGS.gin_param)
    except Exception as error:  # pylint: disable=broad-except
        if os.path.isdir(FLAGS.root_dir):  # a seed's or a trial's: the line is its event too
            events.configure(FLAGS.root_dir, "learner")
        _fail(f"Bad gin configuration: {_first_line(error)}")
        sys.exit(2)
    _train()


def _train() -> None:
    """Runs `train()`; exits 2 for a bad setting, 1 for a failure, 128 + N on signal N."""
    # pylint: disable=import-outside-toplevel
    from alf_async.supervision import promotion
    from alf_async.training import run as run_lib

    from alf_async.runs.provenance import run_tags
    from alf_async.tracking.forwarder import tracked

    made_root_dir = not os.path.exists(FLAGS.root_dir)
    chief = FLAGS.tf_config is None or json.loads(FLAGS.tf_config)["task"]["index"] == 0
    tracker = tracker_settings.from_flags() if chief else tracker_settings.TrackerSettings()
    with events.lifetime(FLAGS.root_dir, "learner", "train", held=promotion.pending()), \
            tracked(FLAGS.root_dir, tracker, run_tags(FLAGS.root_dir, FLAGS.gin_file)):
        _train_or_exit(run_lib, made_root_dir)


def _train_or_exit(run_lib, made_root_dir: bool) -> None:
    # pylint: disable=import-outside-toplevel
    from alf_async.errors import MissingExtraError, ThreadError
    from alf_async.training.checkpoints import CheckpointWriteError
    from alf_async.training.settings import RunSettings

    try:
        remote = {} if FLAGS.serve_port is None else dict(serve_port=FLAGS.serve_port)
        run_lib.train(FLAGS.root_dir, RunSettings(**remote))
    except ValueError as error:
        kind = "Missing package" if isinstance(error, MissingExtraError) else "Bad setting"
        _fail(f"{kind}: {_first_line(error)}")
        if made_root_dir:
            _remove_unstarted(FLAGS.root_dir)
        sys.exit(2)
    except ThreadError as error:
        _fail(_first_line(error), cause=error.__cause__)
        sys.exit(1)
    except CheckpointWriteError as error:
        _fail(_first_line(error))
        sys.exit(1)
    except run_lib.TrainingInterrupted as interrupted:  # logged at the checkpoint if saved
        if not interrupted.saved:
            logging.warning("%s", interrupted)
        sys.exit(128 + interrupted.signum)


def _fail(line: str, cause: Optional[BaseException] = None) -> None:
    """Logs the one line the run fails with (`cause`'s traceback too) and records it as
    the run's typed 'failed' event, where `experiment` and `tune` read it."""
    logging.error("%s", line, exc_info=cause)
    events.emit("failed", error=line)


def _remove_unstarted(root_dir: str) -> None:
    """Removes the root_dir this command made for a run that ended before its first
    checkpoint (a bad env id, a missing package), so that no empty run is left."""
    checkpoints = os.path.join(root_dir, "checkpoints")
    if not (os.path.isdir(checkpoints) and os.listdir(checkpoints)):
        shutil.rmtree(root_dir, ignore_errors=True)


def run() -> None:
    """Trains as the command line says (also a promoted `alf_async.supervision.spare`'s entry)."""
    with exits_fast():
        config.run_command(main)


if __name__ == "__main__":
    run()
