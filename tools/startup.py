"""Time from the command to a solved task, split into its phases.

    python tools/startup.py --seeds=1,2,3

Runs the README's main command with `train.stop_at_return` once per seed, in
a fresh process each time (as a user would), and prints per seed and as the
median: the process's wall time, the imports, the trainer's timeline (build,
compile with each thread's share, first iteration, training, checkpoint and
export) and the trainer's own "return reached after" figure. Before each run
it times a bare `python -c "import tensorflow"` (`tf_import`), and reports the
run's wall time as a multiple of it (`wall_per_tf_import`): machines differ
~2x, the ratio much less.
"""

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

from absl import app, flags

flags.DEFINE_list("seeds", ["1", "2", "3"], "train.seed of each run.")
flags.DEFINE_multi_string("gin_file", ["gin_configs/ppo_async.gin"], "Gin config(s).")
flags.DEFINE_multi_string("gin_param", [], "Extra gin bindings.")
flags.DEFINE_float("stop_at_return", 475.0, "train.stop_at_return.")
flags.DEFINE_float("timeout", 300.0, "Seconds one run may take.")
FLAGS = flags.FLAGS

_PHASE = re.compile(r"([a-z][a-z ]*?) (\d+\.\d+) s")


def parse_log(log: str) -> Dict[str, float]:
    """The phase seconds in a trainer's log (stderr).

    Returns:
        `imports`, every phase of the "Timeline:" line (`compile` also split
        into the threads' names) and `reached` (the trainer's time to the
        return), each in seconds, for those that are in the log.

    Raises:
        ValueError: the log has no "Timeline:" line (the run did not finish).
    """
    phases = {}
    imports = re.search(r"Imports: (\d+\.\d+) s", log)
    if imports:
        phases["imports"] = float(imports.group(1))
    timeline = re.search(r"Timeline: (.*)", log)
    if not timeline:
        raise ValueError("no 'Timeline:' line in the log: the run did not finish")
    line = timeline.group(1)
    threads = re.search(r"\((.*?)\)", line)
    if threads:
        for name, seconds in re.findall(r"(\w+) (\d+\.\d+) s", threads.group(1)):
            phases[f"compile {name}"] = float(seconds)
        line = line.replace(threads.group(0), "")
    for name, seconds in _PHASE.findall(line):
        phases[name.strip()] = float(seconds)
    reached = re.search(r"reached [\d.]+ after (\d+\.\d+) s", log)
    if reached:
        phases["reached"] = float(reached.group(1))
    return phases


def tf_import_seconds() -> float:
    """Wall time of a new process that imports TensorFlow and exits."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True,
                   timeout=FLAGS.timeout, check=True)
    return time.perf_counter() - start


def run_once(seed: str) -> Dict[str, float]:
    """One training run in a new process; its phases and `wall` seconds."""
    with tempfile.TemporaryDirectory() as root_dir:
        command = [sys.executable, "-m", "alf_async.train", f"--root_dir={root_dir}",
                   *[f"--gin_file={f}" for f in FLAGS.gin_file],
                   f"--gin_param=train.seed={seed}",
                   f"--gin_param=train.stop_at_return={FLAGS.stop_at_return}",
                   *[f"--gin_param={p}" for p in FLAGS.gin_param]]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=FLAGS.timeout, check=False)
        wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"seed {seed}: exit {result.returncode}: {result.stderr[-2000:]}")
    return dict(parse_log(result.stderr), wall=wall)


def medians(runs: List[Dict[str, float]]) -> Dict[str, float]:
    """Per phase, the median over the runs that have it."""
    keys = dict.fromkeys(k for run in runs for k in run)
    return {k: statistics.median(run[k] for run in runs if k in run) for k in keys}


def main(argv) -> None:
    del argv
    runs = []
    for seed in FLAGS.seeds:
        baseline = tf_import_seconds()
        run = run_once(seed)
        runs.append(dict(run, tf_import=baseline, wall_per_tf_import=run["wall"] / baseline))
        print(json.dumps(dict(seed=seed, **{k: round(v, 2) for k, v in runs[-1].items()})),
              flush=True)
    summary = medians(runs)
    print("median of %d runs:" % len(runs))
    for key, value in summary.items():
        print(f"  {key:28s} {value:7.2f} {'x' if key == 'wall_per_tf_import' else 's'}")


if __name__ == "__main__":
    app.run(main)
