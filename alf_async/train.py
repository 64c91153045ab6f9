"""Command line entry point.

    python -m alf_async.train --gin_file=gin_configs/ppo_async.gin --root_dir=runs/ppo \\
        --gin_param='AsyncOffPolicyDriver.learn_queue_cap=4'
"""

import sys
import time

from alf_async.gc_policy import exits_fast, imports_uncollected

_IMPORTS_START = time.perf_counter()

with imports_uncollected():  # ~0.8 s of collections otherwise (alf_async.gc_policy)
    import tensorflow as tf
    from absl import app, flags, logging

    from alf_async import config, trainer
    from alf_async.checkpoints import CheckpointWriteError
    from alf_async.errors import ThreadError

_IMPORTS_SECONDS = time.perf_counter() - _IMPORTS_START

flags.DEFINE_string("root_dir", None, "Directory for summaries, checkpoints and config.")
flags.DEFINE_multi_string("gin_file", [], "Gin config file(s), applied in order.")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings, e.g. 'train.seed=1', applied last.")
flags.DEFINE_integer("serve_port", None, "Collect with actor processes (python -m "
                     "alf_async.actor) through a Reverb server on this port (0: any free "
                     "port) instead of env threads in this process.")
flags.DEFINE_integer("tf_threads", 0, "Threads in each of TensorFlow's two op pools (intra-op "
                     "and inter-op); 0: TensorFlow's choice, all cores. 1 lets several runs "
                     "share the cores side by side without oversubscribing them.")
flags.mark_flag_as_required("root_dir")
FLAGS = flags.FLAGS

# In a warm spare (`alf_async.spare`), `run()` builds and warms the learner up
# ahead of the promotion, and waits for it before it touches the run's state.
RUNS_AHEAD = True


def _first_line(error: BaseException) -> str:
    """The error's own first line (gin appends the configurable it passed through)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _set_tf_threads(threads: int) -> None:
    """Sizes TensorFlow's op thread pools; must run before TensorFlow executes anything."""
    if threads < 0:
        logging.error("Bad setting: --tf_threads must be >= 0, got %d", threads)
        sys.exit(2)
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        logging.info("TensorFlow op threads: %d intra-op, %d inter-op",
                     tf.config.threading.get_intra_op_parallelism_threads(),
                     tf.config.threading.get_inter_op_parallelism_threads())


def main(argv) -> None:
    del argv
    logging.info("Imports: %.2f s", _IMPORTS_SECONDS)
    _set_tf_threads(FLAGS.tf_threads)
    try:
        config.parse_config(FLAGS.gin_file, FLAGS.gin_param)
    except Exception as error:  # pylint: disable=broad-except
        logging.error("Bad gin configuration: %s", _first_line(error))
        sys.exit(2)
    try:
        remote = {} if FLAGS.serve_port is None else dict(serve_port=FLAGS.serve_port)
        trainer.train(FLAGS.root_dir, **remote)
    except ValueError as error:
        logging.error("Bad setting: %s", _first_line(error))
        sys.exit(2)
    except ThreadError as error:
        logging.error("%s", _first_line(error), exc_info=error.__cause__)
        sys.exit(1)
    except CheckpointWriteError as error:
        logging.error("%s", _first_line(error))
        sys.exit(1)
    except trainer.TrainingInterrupted as interrupted:
        logging.warning("%s", _first_line(interrupted))
        sys.exit(128 + interrupted.signum)


def run() -> None:
    """Trains as the command line says (also a promoted `alf_async.spare`'s entry)."""
    with exits_fast():
        app.run(main)


if __name__ == "__main__":
    run()
