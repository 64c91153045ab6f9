"""The population as one run of an experiment: its curve and its result.

An experiment cell of `--runner=pbt` has one population per seed; the
experiment report reads each seed's folder as it reads a training run's: the
average return over env steps from `train/`, and `result.json` when it is
done. Here the curve is the best member's score at each ready point, at the
env steps each member has trained then (members train the same K env steps per
interval), and the result and the settings (env, budget) the best member's at
the end.

Thread-safety: used from the controller's one thread.
"""

import os
import shutil
from typing import Dict

from alf_async.runs.curves import load_curve
from alf_async.runs import layout


class PopulationCurve:
    """Writes the population's curve to `root_dir/train`; its seconds count from here."""

    def __init__(self, root_dir: str):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self._tf, self._root = tf, root_dir
        self._writer = tf.summary.create_file_writer(os.path.join(root_dir, "train"))

    def record(self, scores: Dict[int, dict]) -> None:
        """Adds the best of `scores` (`members.score` per member) at their env steps,
        unless the curve already reaches them (a resumed controller's second look)."""
        found = [s for s in scores.values() if s["score"] is not None]
        if not found:
            return
        env_steps = max(s["env_steps"] for s in found)
        try:
            written = load_curve(self._root)["env_steps"]
        except ValueError:
            written = []
        if len(written) and written[-1] >= env_steps:
            return
        with self._writer.as_default():
            best = max(s["score"] for s in found)
            self._tf.summary.scalar(layout.RETURN_TAG, best, step=env_steps)
        self._writer.flush()

    def finish(self, scores: Dict[int, dict], root_dirs: Dict[int, str]) -> None:
        """`result.json`: the best member's score and env steps, and which it is;
        `run_settings.json`: the best member's `root_dirs` entry's (its env, and as
        budget the env steps each member trained)."""
        scores = {i: s for i, s in scores.items() if s and s["score"] is not None}
        if not scores:
            return
        best = max(scores, key=lambda i: scores[i]["score"])
        member_settings = os.path.join(root_dirs[best], layout.SETTINGS_FILE)
        if os.path.exists(member_settings):
            shutil.copyfile(member_settings, os.path.join(self._root, layout.SETTINGS_FILE))
        from alf_async.training import checkpoints  # pylint: disable=import-outside-toplevel
        checkpoints.write_result(self._root, dict(
            average_return=scores[best]["score"], env_steps=scores[best]["env_steps"],
            iteration=scores[best]["iteration"], best_member=best))
