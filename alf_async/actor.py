"""Runs one actor process of a remote learner: it collects unrolls with the
learner's policy and sends them to the learner's Reverb server.

    python -m alf_async.actor --server=LEARNER_HOST:PORT --task=0 \\
        --gin_file=gin_configs/ppo_remote.gin

Use the learner's --gin_file and --gin_param; the learner runs
`python -m alf_async.train ... --serve_port=PORT`. Exit status: 0 on SIGINT or
SIGTERM (after the current unroll), 1 when an env or actor thread failed, 2 for
a bad setting or a learner that never answered (`connect_timeout_secs`), 3 when
the learner stopped answering for `server_timeout_secs` (its training ended, or
it failed), whatever the actor was waiting in.
"""

import os
import sys
import time

from absl import app, flags, logging

from alf_async import config, events
from alf_async.remote import run_secret
from alf_async.training.gc_policy import exits_fast, imports_uncollected

flags.DEFINE_string("server", None, "HOST:PORT of the learner's Reverb server.")
flags.DEFINE_integer("task", None, "This actor process's index, 0 ... max_actors - 1.")
flags.DEFINE_multi_string("gin_file", [], "The learner's gin config file(s).")
flags.DEFINE_multi_string("gin_param", [], "The learner's gin bindings, applied last.")
flags.DEFINE_string("root_dir", None, "The run's folder (local, NFS or gs://), where this "
                    "actor writes its run events (root_dir/events/) and reads the run's "
                    "secret (run_secret; or set ALF_ASYNC_RUN_SECRET); None: no events.")
flags.mark_flags_as_required(["server", "task"])
FLAGS = flags.FLAGS


def warm_up() -> float:
    """Imports TensorFlow, Reverb and the learner's configurables (`train` among
    them: its gin files bind them); returns the seconds it took."""
    start = time.perf_counter()
    with imports_uncollected():  # alf_async.training.gc_policy
        # pylint: disable=import-outside-toplevel,unused-import
        from alf_async.remote import actor_process  # noqa: F401
        from alf_async.training import run  # noqa: F401
    return time.perf_counter() - start


def _check_flags() -> None:
    """Raises ValueError naming a bad flag; runs before any heavy import."""
    config.check_gin_files(FLAGS.gin_file, required=True)
    if FLAGS.task < 0:
        raise ValueError(f"--task must be an integer >= 0, got {FLAGS.task}")
    if not (os.environ.get(run_secret.ENV_VAR) or FLAGS.root_dir):
        run_secret.for_actor(None)  # raises: says how to give the run's secret


def main(argv) -> None:
    del argv
    config.exit_on_bad_flags(_check_flags)
    warm_up()
    # pylint: disable=import-outside-toplevel
    from alf_async.remote.actor_process import StoppedBeforeStart
    from alf_async.supervision.signals import SignalStop

    interrupt = SignalStop()  # installed first: a signal while building stops cleanly too
    stopped = lambda: interrupt.signum is not None
    with interrupt, events.lifetime(FLAGS.root_dir, f"actor {FLAGS.task}", "actor"):
        try:
            actor = _build_actor(stopped)
        except StoppedBeforeStart:
            logging.info("Actor task %d stopped by a signal before it started", FLAGS.task)
            return
        _run(actor, stopped)


def _build_actor(should_stop):
    """The ActorProcess the flags describe; exit status 2 for a bad setting or no learner,
    3 for a learner that stopped answering before the first weights came."""
    # pylint: disable=import-outside-toplevel
    from alf_async.learning.devices import op_threads
    from alf_async.remote.actor_process import ActorProcess, LearnerGone, LearnerNeverAnswered
    from alf_async.remote.learner_watch import EXIT_LEARNER_GONE
    from alf_async.training.assembly import run_settings

    try:
        config.parse_config(FLAGS.gin_file, FLAGS.gin_param)
        settings = run_settings()  # the learner's records, read as the trainer reads them
        op_threads()  # before the actor's first op, as in the learner
        return ActorProcess(FLAGS.server, FLAGS.task, settings.run.algorithm_class,
                            settings.sizes, seed=settings.run.seed,
                            should_stop=should_stop, ends_process=True,
                            root_dir=FLAGS.root_dir)
    except (ValueError, LearnerNeverAnswered, ImportError) as error:
        logging.error("Actor task %d: %s", FLAGS.task, error)
        sys.exit(2)
    except LearnerGone as gone:
        logging.error("Actor task %d: %s", FLAGS.task, gone)
        sys.exit(EXIT_LEARNER_GONE)


def _run(actor, should_stop) -> None:
    """Sends unrolls until `should_stop()` or the learner is gone; exits 1, 2 or 3 on failure."""
    # pylint: disable=import-outside-toplevel
    from alf_async.errors import ThreadError
    from alf_async.remote.actor_process import LearnerGone
    from alf_async.remote.learner_watch import EXIT_LEARNER_GONE

    try:
        sent = actor.run(should_stop)
        logging.info("Actor task %d stopped by a signal after %d unrolls", FLAGS.task, sent)
    except LearnerGone:  # its line is written (`ActorProcess.run`)
        sys.exit(EXIT_LEARNER_GONE)
    except ThreadError as error:
        logging.error("Actor task %d: %s", FLAGS.task, error, exc_info=error.__cause__)
        sys.exit(1)
    except ValueError as error:
        logging.error("Actor task %d: %s", FLAGS.task, error)
        sys.exit(2)


def run() -> None:
    """Runs the actor the command line describes (also a promoted `alf_async.supervision.spare`'s entry)."""
    with exits_fast():
        config.run_command(main)


if __name__ == "__main__":
    run()
