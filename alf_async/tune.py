"""Hyper-parameter search over gin bindings with Optuna (TPE sampling, median pruning).

    pip install '.[tune]'
    python -m alf_async.tune --gin_file=gin_configs/ppo_async.gin \\
        --space=gin_configs/spaces/ppo_cartpole.yaml --trials=12 \\
        --storage=sqlite:///runs/tune/study.db --objective=steps_to_target --target=475

Every trial is an ordinary training run in `OUT/trial_<n>` (OUT: `--out`, or
the directory of a SQLite storage). `--trials` is the number of finished
(complete or pruned) trials the study should hold: running the command again
finishes an interrupted search, a larger number adds trials, and several
processes or hosts given the same storage URL share the study. The best trial
is printed as `--gin_param` bindings; `optuna-dashboard STORAGE` shows the study.
"""

import os
import sys

# TensorBoard's event reader imports TensorFlow: no CPU-feature banner from it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # pylint: disable=wrong-import-position

from alf_async import config, extras  # pylint: disable=wrong-import-position
from alf_async.supervision import backends as backends_lib  # pylint: disable=wrong-import-position
from alf_async.extras import MissingExtraError  # pylint: disable=wrong-import-position
from alf_async.tracking import settings as tracker_settings  # pylint: disable=wrong-import-position

flags.DEFINE_multi_string("gin_file", [], "Gin config file(s) every trial trains with.")
flags.DEFINE_multi_string("gin_param", [], "Gin bindings every trial shares.")
flags.DEFINE_string("space", None, "YAML search space: gin binding -> {low, high[, log]"
                    "[, step]} or {choices: [...]}.")
flags.DEFINE_integer("trials", 12, "Finished (complete or pruned) trials the study should hold.")
flags.DEFINE_string("storage", None, "Optuna storage URL, e.g. sqlite:///runs/tune/study.db.")
flags.DEFINE_string("study", None, "Study name (default: the gin file's name and the objective).")
flags.DEFINE_integer("parallel", 1, "Trials run at once by this process (--workers=1, "
                     "--backend=local).")
flags.DEFINE_integer("workers", 1, "N, trial workers sharing the study, each one trial at a "
                     "time: processes here, or with --backend=ray on the cluster's nodes "
                     "(SQLite only where they share one node).")
flags.DEFINE_enum("objective", "auc", ["auc", "final", "steps_to_target", "seconds_to_target"],
                  "auc: mean average return over the run; final: the last average return; "
                  "steps_to_target: env steps to --target; seconds_to_target: seconds of "
                  "training (compiling included) to --target (both minimised).")
flags.DEFINE_float("target", None, "The return of --objective=steps_to_target or "
                   "seconds_to_target.")
flags.DEFINE_boolean("prune", True, "Stop trials whose returns fall below the median of "
                     "earlier trials at the same env step.")
flags.DEFINE_integer("prune_after", 50_000, "Env steps a trial runs before it may be pruned "
                     "(early returns say little).")
flags.DEFINE_integer("startup_trials", 3, "Trials that run to the end before pruning starts "
                     "(and before TPE replaces random sampling).")
flags.DEFINE_integer("report_steps", 10_000, "Trials are compared for pruning at multiples of "
                     "this many env steps.")
flags.DEFINE_integer("seed", None, "Seed of the sampler (None: random).")
flags.DEFINE_integer("heartbeat_secs", 30, "A running trial's worker writes a heartbeat to "
                     "the storage this often (Optuna's heartbeat_interval).")
flags.DEFINE_integer("grace_secs", 120, "A trial whose worker wrote no heartbeat for this "
                     "long (it died, or its node was lost) is marked failed and its settings "
                     "run again, once (Optuna's grace_period).")
flags.DEFINE_integer("tf_threads", 0, "Each trial's --tf_threads (0: cores // parallel).")
flags.DEFINE_bool("summary", True, "Print the study's counts and its best trial at the end "
                  "(a worker of --workers leaves it to the command that started it).")
flags.DEFINE_string("out", None, "Directory of the trials' runs (default: next to a SQLite "
                    "storage file).")
tracker_settings.define_flags()
backends_lib.define_placement_flags("worker")
FLAGS = flags.FLAGS


def _fail(message: str) -> None:
    logging.error("%s", message)
    sys.exit(2)


def _out_dir(storage: str) -> str:
    if FLAGS.out:
        return os.path.abspath(FLAGS.out)
    if storage.startswith("sqlite:///"):
        return os.path.dirname(os.path.abspath(storage[len("sqlite:///"):]))
    _fail("Bad setting: --out is needed with a storage that is not a SQLite file")
    return ""


def _check_flags() -> None:
    if not FLAGS.gin_file or not FLAGS.space or not FLAGS.storage:
        _fail("Bad setting: tune needs --gin_file, --space and --storage")
    try:
        config.check_gin_files(FLAGS.gin_file, required=True)
        tracker_settings.from_flags().check()
    except ValueError as error:
        _fail(f"{'Missing package' if isinstance(error, MissingExtraError) else 'Bad setting'}: "
              f"{error}")
    if FLAGS.objective.endswith("_to_target") and FLAGS.target is None:
        _fail(f"Bad setting: --objective={FLAGS.objective} needs --target")
    if FLAGS.storage.startswith("postgresql"):
        try:
            extras.check_installed("psycopg2", "tune", f"--storage={FLAGS.storage}")
        except MissingExtraError as error:
            _fail(f"Missing package: {error}")
    if not 1 <= FLAGS.heartbeat_secs < FLAGS.grace_secs:
        _fail(f"Bad setting: --heartbeat_secs must be >= 1 and below --grace_secs, got "
              f"{FLAGS.heartbeat_secs} and {FLAGS.grace_secs}")
    if min(FLAGS.trials, FLAGS.parallel, FLAGS.report_steps, FLAGS.workers) < 1:
        _fail(f"Bad setting: --trials, --parallel, --report_steps and --workers must be >= 1, "
              f"got {FLAGS.trials}, {FLAGS.parallel}, {FLAGS.report_steps} and {FLAGS.workers}")


def _search_settings(study, storage: str, tracker, tf_threads: int):
    name = FLAGS.study or (os.path.splitext(os.path.basename(FLAGS.gin_file[-1]))[0] +
                           f"_{FLAGS.objective}")
    return study.SearchSettings(
        storage=storage, name=name, out_dir=_out_dir(storage),
        gin_files=[os.path.abspath(f) for f in FLAGS.gin_file],
        bindings=list(FLAGS.gin_param), space_path=FLAGS.space, trials=FLAGS.trials,
        parallel=FLAGS.parallel, objective=FLAGS.objective, target=FLAGS.target,
        prune=FLAGS.prune, startup_trials=FLAGS.startup_trials, seed=FLAGS.seed,
        report_steps=FLAGS.report_steps, prune_after=FLAGS.prune_after,
        tf_threads=tf_threads, tracker=tracker, heartbeat_secs=FLAGS.heartbeat_secs,
        grace_secs=FLAGS.grace_secs, summary=FLAGS.summary)


def _run_workers(study, settings, argv) -> int:
    """`--workers` trial workers where `--backend` puts them; the study made first, its
    best trial printed at the end."""
    from alf_async.experiments import workers  # pylint: disable=import-outside-toplevel
    placement = backends_lib.placement_from_flags("worker", settings.out_dir, "tune")
    try:
        workers.check_storage(settings.storage, FLAGS.workers, placement.nodes)
        study.open_study(settings)
        tf_threads = FLAGS.tf_threads or placement.tf_threads(
            placement.capacity(FLAGS.workers))
        code = workers.run_workers(placement, workers.worker_command(
            argv, settings.out_dir, tf_threads), FLAGS.workers, settings.out_dir)
        if code == 1 and study.holds_every_trial(settings):
            code = 0  # a worker or a trial failed, and others finished the study
    finally:
        placement.close()
    study.print_best(study.open_study(settings), settings)
    return code


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"tune takes no positional arguments, got {argv[1:]}")
    _check_flags()
    try:
        from alf_async.experiments import study  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        _fail(f"tune needs {error.name}: pip install '.[tune]'")
    storage = FLAGS.storage
    if storage.startswith("sqlite:///"):
        os.makedirs(os.path.dirname(os.path.abspath(storage[len("sqlite:///"):])), exist_ok=True)
    tracker = tracker_settings.from_flags()
    settings = _search_settings(study, storage, tracker, FLAGS.tf_threads or max(
        1, (os.cpu_count() or 1) // FLAGS.parallel))
    from alf_async.tracking import clients  # pylint: disable=import-outside-toplevel
    clients.make_groups_ahead(tracker, [settings.name])
    try:
        if FLAGS.workers > 1 or FLAGS.backend == "ray":
            code = _run_workers(study, settings, sys.argv)
        else:
            code = study.run_search(settings)
    except ValueError as error:
        _fail(f"{'Missing package' if isinstance(error, MissingExtraError) else 'Bad setting'}: "
              f"{error}")
    sys.exit(code)


if __name__ == "__main__":
    config.run_command(main)
