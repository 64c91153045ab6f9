"""The command lines of a run: one seed's `python -m alf_async.train`, or its runner's
(`python -m alf_async.chaos`, `python -m alf_async.pbt`) for the commands that
start many runs (experiment seeds, PBT members, search trials).

Light on purpose (no TensorFlow). Thread-safety: pure functions.
"""

import sys
from typing import List

# The runners other than `train`: the module whose command trains one seed, with
# `--root_dir`, `--gin_file`, `--gin_param`, `--seed` and the cell's runner flags.
RUNNER_MODULES = {"chaos": "alf_async.chaos", "pbt": "alf_async.pbt"}


def runner_command(runner: str, root_dir: str, gin_files, bindings, seed: int,
                   runner_flags) -> List[str]:
    """The command line of one seed of a `chaos` cell (a supervised launch with faults)
    or a `pbt` cell (a population); their processes' threads: TensorFlow's choice."""
    return [sys.executable, "-m", RUNNER_MODULES[runner], f"--root_dir={root_dir}",
            *[f"--gin_file={f}" for f in gin_files], *[f"--gin_param={b}" for b in bindings],
            f"--seed={seed}", *runner_flags]


def train_command(root_dir: str, gin_files, bindings, tf_threads: int) -> List[str]:
    """The `python -m alf_async.train` command line of one run."""
    return [sys.executable, "-m", "alf_async.train", f"--root_dir={root_dir}",
            *[f"--gin_file={f}" for f in gin_files], *[f"--gin_param={b}" for b in bindings],
            f"--tf_threads={tf_threads}"]
