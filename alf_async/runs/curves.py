"""Learning curves read back from a training run's TensorBoard event files."""

import glob
import logging
import os
from typing import Dict, Optional

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.util import tensor_util

from alf_async.runs.layout import EVAL_RETURN_TAG, RETURN_TAG, SCORE_AXES

# TensorBoard's reader logs every event file it moves past at INFO.
logging.getLogger("tensorboard").setLevel(logging.WARNING)

Curve = Dict[str, np.ndarray]  # 'env_steps', 'seconds', 'value': 1-D arrays of one length


def load_curve(run_dir: str, tag: Optional[str] = None) -> Curve:
    """`tag` of `run_dir/train`, its NaN points (no episode finished yet) left out.

    `tag` None: the run's score (`training.scores`): the collection's return
    against env steps, or an offline run's greedy evaluation return, whose
    `env_steps` are then learner iterations (`score_axis` says which).

    `seconds` counts from the run's first event: the summary writer's creation,
    after imports and building, before compiling. A resumed run's pauses do not
    count: each training process writes its own event file, and the time
    between one file's last event and the next one's first is left out.

    Raises:
        ValueError: the run has no such scalar.
    """
    train_dir = os.path.join(run_dir, "train")
    if not os.path.isdir(train_dir):
        raise ValueError(f"{run_dir} has no train/ directory (is it a training root_dir?)")
    acc = event_accumulator.EventAccumulator(train_dir,
                                             size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    tag = tag or _score_tag(acc.Tags()["tensors"])
    if tag not in acc.Tags()["tensors"]:
        raise ValueError(f"{run_dir} has no '{tag}' summaries (is it a training root_dir?)")
    events = sorted(acc.Tensors(tag), key=lambda e: (e.step, e.wall_time))
    value = np.array([float(tensor_util.make_ndarray(e.tensor_proto)) for e in events])
    keep = np.isfinite(value)
    return dict(env_steps=np.array([e.step for e in events], dtype=np.int64)[keep],
                seconds=active_seconds(train_dir, [e.wall_time for e in events])[keep],
                value=value[keep])


def _score_tag(tags) -> str:
    """The score's tag among `tags`: an offline run writes no env-step return."""
    return EVAL_RETURN_TAG if EVAL_RETURN_TAG in tags and RETURN_TAG not in tags else RETURN_TAG


def score_axis(run_dir: str) -> str:
    """What the steps of `run_dir`'s score curve count: 'env steps' or 'learner iterations'."""
    acc = event_accumulator.EventAccumulator(os.path.join(run_dir, "train"),
                                             size_guidance={event_accumulator.TENSORS: 1})
    acc.Reload()
    return SCORE_AXES[_score_tag(acc.Tags()["tensors"])]


def active_seconds(train_dir: str, wall_times) -> np.ndarray:
    """Seconds of training before each of `wall_times`, the pauses between the
    event files of `train_dir` (one per training process) left out."""
    spans = []  # (first, last) wall time of each file
    for path in glob.glob(os.path.join(train_dir, "events.out.tfevents.*")):
        walls = [event.wall_time for event in event_file_loader.EventFileLoader(path).Load()]
        if walls:
            spans.append((min(walls), max(walls)))
    spans.sort()
    starts = np.array([first for first, _ in spans])
    paused = np.concatenate([[0.0], np.cumsum([spans[k + 1][0] - spans[k][1]
                                                for k in range(len(spans) - 1)])])
    walls = np.asarray(wall_times, dtype=np.float64)
    segment = np.maximum(np.searchsorted(starts, walls, side="right") - 1, 0)
    return walls - starts[0] - paused[segment]


def downsample(curve: Curve, points: int = 100) -> Dict[str, list]:
    """At most `points` evenly spaced points of `curve` (first and last kept), as lists."""
    n = len(curve["value"])
    index = np.unique(np.linspace(0, n - 1, min(points, n)).round().astype(int)) if n else []
    return {key: [round(float(v), 3) for v in np.asarray(values)[index]]
            for key, values in curve.items()}


def save_figure(plt, fig, path: str) -> None:
    """Lays `fig` out, writes it to `path` (100 dpi) and closes it."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
