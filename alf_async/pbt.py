"""Population-based training, every mutation checked against what the member trains with.

    python -m alf_async.pbt --gin_file=gin_configs/ppo_lunarlander.gin --root_dir=runs/pbt \\
        --population=8 --interval_env_steps=50000 --generations=10 \\
        --mutate='alf_async.Learner.learning_rate:log_uniform(1e-4,3e-3)' \\
        --mutate='PPOAlgorithm.entropy_coeff:uniform(0,0.02)'
    python -m alf_async.pbt report runs/pbt
    python -m alf_async.pbt replay runs/pbt MEMBER

Each member is an ordinary run in `ROOT/member_<i>` (its checkpoints,
TensorBoard, `result.json`: `play` and the experiment report work on it). Every
`--interval_env_steps` a member is ready; the bottom `--quantile` copies a top
member's checkpoint and perturbs its settings (`alf_async.population`). After
each start the member reports the settings it trains with and the digest of
the weights it restored, read from the live run; any difference from what was
asked stops the population with one line and exit status 1. `--noexploit`
runs the same population as a random search. `report` writes
`ROOT/pbt/report.md` and `curves.png`; `replay` re-runs one member's schedule of
settings (its ancestry's) from scratch as one run in `ROOT/replay_<i>`, one
interval at a time as the population trained (each start resumes the last,
with that generation's settings), with the population's gin files and
bindings (`ROOT/pbt/settings.json`).
`--tracker=mlflow` (or wandb) also reports each member as one run over all its
intervals, in the population's group (docs/tracking.md). Ctrl-C stops every
member (each checkpoints) and exits 130; the same command resumes. Bad input:
one line, exit 2.
"""

import dataclasses
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags, logging  # pylint: disable=wrong-import-position

from alf_async import config, events  # pylint: disable=wrong-import-position
from alf_async.supervision import backends as backends_lib  # pylint: disable=wrong-import-position
from alf_async.tracking import settings as tracker_settings  # pylint: disable=wrong-import-position

flags.DEFINE_multi_string("gin_file", [], "Every member's gin config file(s).")
flags.DEFINE_multi_string("gin_param", [], "Every member's gin bindings.")
flags.DEFINE_string("root_dir", None, "The population's folder.")
flags.DEFINE_multi_string("mutate", [], "BINDING:SPEC, a gin binding of a number (or a "
                          "macro) whose change keeps every shape, and its range: "
                          "uniform(LOW,HIGH) or log_uniform(LOW,HIGH); integer bounds keep "
                          "it an integer.")
flags.DEFINE_integer("population", 4, "P, members.")
flags.DEFINE_integer("interval_env_steps", 50_000, "K, env steps between ready points.")
flags.DEFINE_integer("generations", 5, "G, intervals (each member trains G * K env steps).")
flags.DEFINE_float("quantile", 0.25, "The bottom share that copies the top share.")
flags.DEFINE_list("perturb_factors", ["0.8", "1.2"], "Explore multiplies a setting by one "
                  "of these, drawn at random (then keeps it within its range).")
flags.DEFINE_float("resample_probability", 0.25, "Explore draws a setting afresh this often "
                   "(else multiplies it by one of --perturb_factors).")
flags.DEFINE_bool("exploit", True, "Copy and perturb; --noexploit: a random search of the "
                  "same budget.")
flags.DEFINE_integer("seed", 0, "Seeds the draws; member i trains with seed + i.")
flags.DEFINE_integer("parallel", 1, "Members trained at once.")
flags.DEFINE_integer("tf_threads", 0, "Each member's --tf_threads (0: cores // parallel; "
                     "--backend=ray: the CPUs of --member_resources).")
backends_lib.define_placement_flags("member")
tracker_settings.define_flags()
FLAGS = flags.FLAGS

USAGE = "usage: python -m alf_async.pbt [report ROOT | replay ROOT MEMBER] (see --help)"


def _fail(message: str, code: int = 2) -> None:
    logging.error("%s", message)
    sys.exit(code)


def _settings():
    # pylint: disable=import-outside-toplevel
    from alf_async.population.mutations import parse_mutations
    from alf_async.population.settings import PbtSettings, check, parse_factors
    if not FLAGS.root_dir:
        raise ValueError("--root_dir is required")
    config.check_gin_files(FLAGS.gin_file, required=True)
    settings = PbtSettings(
        os.path.abspath(FLAGS.root_dir), FLAGS.gin_file, FLAGS.gin_param,
        parse_mutations(FLAGS.mutate), FLAGS.population, FLAGS.interval_env_steps,
        FLAGS.generations, FLAGS.quantile, factors=parse_factors(FLAGS.perturb_factors),
        resample_probability=FLAGS.resample_probability,
        seed=FLAGS.seed, parallel=FLAGS.parallel, tf_threads=FLAGS.tf_threads,
        exploit=FLAGS.exploit)
    check(settings)
    return settings


def _run() -> None:
    # pylint: disable=import-outside-toplevel
    from alf_async.population import controller, shapes
    from alf_async.supervision.signals import SignalStop
    from alf_async.tracking import clients
    try:
        tracker = tracker_settings.from_flags()
        tracker.check()
        settings = _settings()
        shapes.check(settings.gin_files, settings.gin_params, settings.mutations)
        os.makedirs(settings.root_dir, exist_ok=True)
        placement = backends_lib.placement_from_flags("member", settings.root_dir, "pbt")
    except ValueError as error:
        _fail(f"Bad setting: {error}")
    clients.make_groups_ahead(tracker, [tracker.group or os.path.basename(settings.root_dir)])
    if not FLAGS.tf_threads:
        settings = dataclasses.replace(settings, tf_threads=placement.tf_threads(
            placement.capacity(settings.parallel)))
    with SignalStop("stopping every member") as interrupt, events.lifetime(
            settings.root_dir, "pbt", "pbt"):
        try:
            status = controller.run(settings, lambda: interrupt.signum is not None, placement,
                                    tracker)
        except controller.MutationNotApplied as error:
            _fail(f"Mutation not applied: {error}", 1)
        except RuntimeError as error:
            _fail(str(error), 1)
        finally:
            placement.close()
    logging.info("pbt: %s", "done" if status == 0 else "stopped; the same command resumes")
    sys.exit(status)


def _report(root: str) -> None:
    from alf_async.population import lineage  # pylint: disable=import-outside-toplevel
    try:
        print(lineage.write_report(os.path.abspath(root)), end="")
    except ValueError as error:
        _fail(str(error))
    folder = os.path.join(root, lineage.PBT_DIR)
    print(f"wrote {os.path.join(folder, 'report.md')} and {os.path.join(folder, 'curves.png')}")


def _replay(root: str, member: str) -> None:
    """Trains member `member`'s lineage again from scratch into `ROOT/replay_<member>`, one
    interval at a time as the population did: each a start that resumes the last, with
    that generation's settings as gin bindings (any mutated binding takes effect so)."""
    # pylint: disable=import-outside-toplevel
    import subprocess
    from alf_async.population import controller, lineage
    from alf_async.population.mutations import bindings
    root = os.path.abspath(root)
    try:
        settings = controller.saved_settings(root)
        chain = lineage.ancestry(lineage.read(root), int(member))
    except ValueError as error:
        _fail(str(error))
    replay_dir = os.path.join(root, f"replay_{member}")
    logging.info("pbt replay: member %s's schedule over %d generations (%s), from scratch "
                 "into %s", member, len(chain), lineage.schedule_text(chain), replay_dir)
    tracked = tracker_settings.from_flags().flags()  # a run of its own, `<root>/replay_<i>`
    for generation, record in enumerate(chain, start=1):
        code = subprocess.call(_interval_command(
            settings, replay_dir, generation * settings.interval_env_steps,
            bindings(settings.mutations, record["settings"])) + tracked)
        if code:
            sys.exit(code)
    sys.exit(0)


def _interval_command(settings, root_dir: str, env_steps: int, mutated) -> list:
    """The `train` command of one replayed interval, ending at `env_steps`."""
    from alf_async.runs.commands import train_command  # pylint: disable=import-outside-toplevel
    return train_command(root_dir, settings.gin_files, [
        *settings.gin_params, f"train.seed={settings.seed}", f"train.num_env_steps={env_steps}",
        "train.stop_at_return=None", *mutated], FLAGS.tf_threads)


def main(argv) -> None:
    args = argv[1:]
    if not args:
        _run()
        return
    config.check_subcommand(args, ("report", "replay"), USAGE)
    if args[0] == "report" and len(args) == 2:
        _report(args[1])
    elif args[0] == "replay" and len(args) == 3:
        _replay(args[1], args[2])
    else:
        _fail(f"{args[0]} takes {'ROOT' if args[0] == 'report' else 'ROOT MEMBER'}; {USAGE}")


if __name__ == "__main__":
    config.run_command(main)
