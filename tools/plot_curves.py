"""Learning curves of one or more runs: average return against env steps and time.

    pip install '.[plot]'
    python tools/plot_curves.py runs/ppo runs/impala --out=curves.png

Reads `Metrics_vs_EnvironmentSteps/AverageReturn` (or `--tag`) from each run's
`train/` event files, as the experiment report does; one line per run, named
after its directory. Without matplotlib it ends with one line naming the extra.
"""

import os
import sys
from typing import List

from absl import app, flags, logging

from alf_async import extras
from alf_async.errors import MissingExtraError
from alf_async.runs.curves import load_curve
from alf_async.runs.layout import RETURN_TAG

flags.DEFINE_string("out", "curves.png", "PNG file to write.")
flags.DEFINE_string("tag", RETURN_TAG, "Scalar to plot.")
FLAGS = flags.FLAGS


def plot(plt, run_dirs: List[str], tag: str, out: str) -> None:
    """Writes a PNG with `tag` against env steps (left) and training time (right)."""
    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for run_dir in run_dirs:
        curve = load_curve(run_dir, tag)
        name = os.path.basename(os.path.normpath(run_dir))
        by_steps.plot(curve["env_steps"], curve["value"], label=name)
        by_time.plot(curve["seconds"], curve["value"], label=name)
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel("seconds of training")
    for axes in (by_steps, by_time):
        axes.set_ylabel(tag.split("/")[-1])
        axes.grid(alpha=0.3)
        axes.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv) -> None:
    if len(argv) < 2:
        raise app.UsageError("Give one or more run directories.")
    try:
        plot(extras.pyplot("tools/plot_curves.py"), argv[1:], FLAGS.tag, FLAGS.out)
    except (MissingExtraError, ValueError) as error:
        logging.error("%s", error)
        sys.exit(2)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
