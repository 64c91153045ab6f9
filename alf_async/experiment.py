"""Experiments from one command: seeds in parallel, grids, and reports.

    python -m alf_async.experiment run --gin_file=gin_configs/ppo_async.gin \\
        --seeds=1-5 --parallel=2 --target=475 --out=runs/exp/ppo
    python -m alf_async.experiment run ... --grid='alf_async.Learner.num_epochs=[2, 4]'
    python -m alf_async.experiment report runs/exp/ppo [runs/exp/other ...] --out=DIR
    python -m alf_async.experiment report runs/exp/ppo --publish=docs/results/ppo_async.json
    python -m alf_async.experiment docs

`run` trains every (cell, seed) as an ordinary run in `OUT/<cell>/seed_<S>`;
running it again skips finished seeds and resumes interrupted ones. `report`
writes `summary.json`, `results.md` and `curves.png`; `--publish` also writes
the summary to the docs' results. `docs` regenerates the README's configs table
and docs/results.md from docs/results/*.json. See docs/experiments.md.
"""

import json
import os
import shlex
import sys
from typing import Sequence

# TensorBoard's event reader imports TensorFlow: no CPU-feature banner from it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # pylint: disable=wrong-import-position

from alf_async import config  # pylint: disable=wrong-import-position
from alf_async.supervision import backends as backends_lib  # pylint: disable=wrong-import-position
from alf_async.extras import MissingExtraError  # pylint: disable=wrong-import-position
from alf_async.tracking import settings as tracker_settings  # pylint: disable=wrong-import-position

flags.DEFINE_multi_string("gin_file", [], "run: gin config file(s) every seed trains with.")
flags.DEFINE_multi_string("gin_param", [], "run: gin bindings every seed shares.")
flags.DEFINE_multi_string("grid", [], "run: 'BINDING=[V1, V2, ...]': one cell per value; "
                          "several grids make their cartesian product.")
flags.DEFINE_enum("runner", "train", ["train", "chaos", "pbt"], "run: what trains each "
                  "seed: alf_async.train; alf_async.chaos (the supervised launch "
                  "with faults injected); or alf_async.pbt (a population: its curve is the "
                  "best member's score at each ready point). Their flags as --gin_param or "
                  "--grid bindings that start with '--', e.g. --grid='--faults=[none, all]', "
                  "--grid='--exploit=[true, false]'.")
flags.DEFINE_string("cell", None, "run: the cell saved at this cell.json (or its folder: an "
                    "experiment's cell, a tune trial) instead of --gin_file and --grid; "
                    "--gin_param adds to its bindings.")
flags.DEFINE_bool("new_cell", False, "run: where --out already holds a cell made with other "
                  "settings, put this one beside it (<cell>-2) instead of refusing.")
flags.DEFINE_string("seeds", "1-3", "run: seeds, a range or a list ('1-5', '1,3,7').")
flags.DEFINE_integer("parallel", 0, "run: training processes at once (0: one locally; "
                     "--backend=ray: as many as the cluster holds at the start, and never "
                     "more).")
flags.DEFINE_integer("tf_threads", 0, "run: each process's --tf_threads (0: its share of the "
                     "cores, cores // parallel; --backend=ray: the CPUs of --seed_resources).")
flags.DEFINE_float("target", None, "The average return a seed must reach (run: stored "
                   "with the cells; report: overrides it).")
flags.DEFINE_string("publish", None, "report: also write the summary, with the command that "
                    "made it, here (docs/results/<config>.json), then run `docs`.")
flags.DEFINE_string("normalize", None, "report: 'RANDOM,EXPERT': the random and expert "
                    "returns of D4RL's normalized score, 100 × (final − RANDOM) / (EXPERT − "
                    "RANDOM), added for every seed and cell (offline results).")
flags.DEFINE_string("out", None, "run: the experiment directory. report: where the report "
                    "goes (default: the first directory given).")
tracker_settings.define_flags()
backends_lib.define_placement_flags("seed")
FLAGS = flags.FLAGS

USAGE = "usage: python -m alf_async.experiment run|report|docs ... (see --help)"
COMMAND_FILE = "command.txt"  # in an experiment directory: the `run` command that made it


def _fail(message: str, code: int = 2) -> None:
    logging.error("%s", message)
    sys.exit(code)


def run_command() -> int:
    """`run`: trains the cells' seeds; the exit status of the whole experiment."""
    from alf_async.experiments import cells, launcher  # pylint: disable=import-outside-toplevel
    if not FLAGS.out:
        _fail("Bad setting: run needs --out=DIR (the experiment directory)")
    try:
        seeds = cells.parse_seeds(FLAGS.seeds)
        experiment = _cells(cells)
        runs = launcher.seed_runs(experiment, seeds, os.path.abspath(FLAGS.out),
                                  FLAGS.new_cell, save=False)
        tracker = tracker_settings.from_flags()
        tracker.check()
        if FLAGS.parallel < 0:
            raise ValueError(f"--parallel must be >= 0, got {FLAGS.parallel}")
        placement = backends_lib.placement_from_flags("seed", os.path.abspath(FLAGS.out),
                                                      "experiment")
    except ValueError as error:
        _fail(f"{'Missing package' if isinstance(error, MissingExtraError) else 'Bad setting'}: "
              f"{error}")
    try:  # nothing is written before every setting was checked
        launcher.save_cells(runs)
        _record_command(FLAGS.out)
        seed_launcher = launcher.Launcher(runs, FLAGS.parallel, FLAGS.tf_threads or None,
                                          tracker=tracker, placement=placement)
        from alf_async.tracking import clients  # pylint: disable=import-outside-toplevel
        clients.make_groups_ahead(tracker, sorted({run.cell.name for run in runs}))
        stopped = seed_launcher.run()
    finally:
        placement.close()
    if stopped is not None:
        return 128 + stopped
    for name, line in seed_launcher.failed.items():
        logging.error("%s failed: %s", name, line)
    return 1 if seed_launcher.failed else 0


def _cells(cells) -> list:
    """The cells `run` trains: `--cell`'s, or those of --gin_file, --gin_param and --grid."""
    if FLAGS.cell:
        if FLAGS.gin_file or FLAGS.grid:
            raise ValueError("--cell takes the place of --gin_file and --grid")
        return [cells.cell_again(FLAGS.cell, FLAGS.gin_param)]
    config.check_gin_files(FLAGS.gin_file, required=True)
    return cells.make_cells([os.path.abspath(f) for f in FLAGS.gin_file], FLAGS.gin_param,
                            FLAGS.grid, FLAGS.target, FLAGS.runner)


def _record_command(out: str) -> None:
    """Adds this command line to `out/command.txt`, unless it is there already."""
    from alf_async.runs import layout  # pylint: disable=import-outside-toplevel
    line = shlex.join(["python", "-m", "alf_async.experiment", *sys.argv[1:]])
    path = os.path.join(out, COMMAND_FILE)
    lines = open(path).read().splitlines() if os.path.exists(path) else []
    if line not in lines:
        layout.write_text(path, "\n".join(lines + [line]) + "\n")


def report_command(dirs) -> int:
    """`report`: writes summary.json, results.md and curves.png."""
    try:
        from alf_async.experiments import report  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        _fail(f"report needs {error.name}: pip install '.[experiment]'")
    if not dirs:
        _fail("Bad setting: report needs one or more experiment directories")
    out = FLAGS.out or dirs[0]
    try:
        summary = report.write_report(dirs, out, FLAGS.target, _normalize(FLAGS.normalize))
    except ValueError as error:
        _fail(f"Bad setting: {error}")
    cells = sum(len(e["cells"]) for e in summary["experiments"])
    print(f"{cells} cell{'s' * (cells != 1)}: wrote {os.path.join(out, 'summary.json')}, results.md and "
          f"curves.png")
    if FLAGS.publish:
        _publish(summary, dirs, FLAGS.publish)
        return docs_command(redraw=[os.path.splitext(os.path.basename(FLAGS.publish))[0]])
    return 0


def _normalize(text):
    """`--normalize`'s (random, expert) returns (None: not given).

    Raises:
        ValueError: not two numbers.
    """
    if text is None:
        return None
    try:
        random_return, expert_return = (float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--normalize takes 'RANDOM,EXPERT' (two returns), got {text!r}") \
            from None
    return random_return, expert_return


def _publish(summary: dict, experiment_dirs: Sequence[str], path: str) -> None:
    """Writes `summary` with its config and the commands that made its experiments
    (one line each) to `path` (the docs' results)."""
    from alf_async.runs import layout  # pylint: disable=import-outside-toplevel
    commands = [os.path.join(d, COMMAND_FILE) for d in experiment_dirs]
    command = "\n".join(open(f).read().strip() for f in commands if os.path.exists(f)) or None
    cells = [c for e in summary["experiments"] for c in e["cells"]]
    for cell in cells:
        cell["gin_files"] = [os.path.relpath(f) for f in cell["gin_files"]]
    name = os.path.basename(cells[0]["gin_files"][-1]) if cells[0]["gin_files"] else None
    layout.write_text(path, json.dumps(dict(config=name, source="alf_async.experiment",
                                           command=command, **summary), indent=1))
    print(f"published {path}")


def docs_command(redraw: Sequence[str] = ()) -> int:
    """`docs`: rewrites the README's configs table and docs/results.md (run it in a
    checkout), and the curves of the results named in `redraw`."""
    from alf_async.experiments import docs_tables  # pylint: disable=import-outside-toplevel
    try:
        changed = docs_tables.write(os.getcwd(), redraw)
    except (OSError, ValueError) as error:
        _fail(f"docs must run in a checkout of alf_async (README.md, docs/results/): {error}")
    print("rewrote " + ", ".join(changed) if changed else "the result tables are up to date")
    return 0


def main(argv) -> None:
    config.check_subcommand(argv[1:], ("run", "report", "docs"), USAGE)
    if argv[1] == "docs":
        sys.exit(docs_command())
    if argv[1] == "run":
        if len(argv) > 2:
            raise app.UsageError(f"run takes no positional arguments, got {argv[2:]}")
        sys.exit(run_command())
    sys.exit(report_command(argv[2:]))


if __name__ == "__main__":
    config.run_command(main)
