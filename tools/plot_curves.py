"""Learning curves of one or more runs: average return against env steps and time.

    pip install '.[plot]'
    python tools/plot_curves.py runs/ppo runs/impala --out=curves.png

Reads `Metrics_vs_EnvironmentSteps/AverageReturn` from each run's `train/`
event files with TensorBoard's own reader; one line per run, named after its
directory.
"""

import os
from typing import Dict, List

import numpy as np
import tensorflow as tf
from absl import app, flags
from tensorboard.backend.event_processing import event_accumulator

flags.DEFINE_string("out", "curves.png", "PNG file to write.")
flags.DEFINE_string("tag", "Metrics_vs_EnvironmentSteps/AverageReturn", "Scalar to plot.")
FLAGS = flags.FLAGS


def load_curve(run_dir: str, tag: str) -> Dict[str, np.ndarray]:
    """`{'env_steps', 'seconds', 'value'}` arrays of `tag` in `run_dir/train`.

    Raises:
        ValueError: the run has no such scalar.
    """
    acc = event_accumulator.EventAccumulator(os.path.join(run_dir, "train"),
                                             size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    if tag not in acc.Tags()["tensors"]:
        raise ValueError(f"{run_dir} has no '{tag}' summaries (is it a training run_dir?)")
    events = sorted(acc.Tensors(tag), key=lambda e: e.wall_time)
    wall = np.array([e.wall_time for e in events])
    return dict(env_steps=np.array([e.step for e in events]), seconds=wall - wall[0],
                value=np.array([float(tf.make_ndarray(e.tensor_proto)) for e in events]))


def plot(run_dirs: List[str], tag: str, out: str) -> None:
    """Writes a PNG with `tag` against env steps (left) and wall time (right)."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for run_dir in run_dirs:
        curve = load_curve(run_dir, tag)
        name = os.path.basename(os.path.normpath(run_dir))
        by_steps.plot(curve["env_steps"], curve["value"], label=name)
        by_time.plot(curve["seconds"], curve["value"], label=name)
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel("seconds since the first summary")
    for axes in (by_steps, by_time):
        axes.set_ylabel(tag.split("/")[-1])
        axes.grid(alpha=0.3)
        axes.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv) -> None:
    if len(argv) < 2:
        raise app.UsageError("Give one or more run directories.")
    plot(argv[1:], FLAGS.tag, FLAGS.out)
    print(f"wrote {FLAGS.out}")


if __name__ == "__main__":
    app.run(main)
