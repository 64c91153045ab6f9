"""What evaluation videos cost the trainer.

Prints, in one run on one machine (DESIGN.md §5), the trainer's frames/s with
`train.eval_video_interval=1` (a greedy episode recorded at every evaluation,
by the video process) against the same run without videos, in alternating
rounds of fresh `train` commands, and their median ratio (target >= 0.95).
Both runs evaluate at the same iterations; only the videos differ. Each round
also prints how many videos the run wrote (a ratio with none would mean
nothing).

    python tools/videos_benchmark.py --repeats=3
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

flags.DEFINE_integer("repeats", 3, "Alternating rounds; the median ratio is reported.")
flags.DEFINE_multi_string("gin_file", ["gin_configs/ppo_async.gin"], "Gin config(s).")
flags.DEFINE_multi_string("gin_param", [], "Extra gin bindings, for both runs.")
flags.DEFINE_integer("num_env_steps", 400_000, "train.num_env_steps of each run.")
flags.DEFINE_integer("eval_interval", 40, "train.eval_interval (iterations) of each run.")
flags.DEFINE_float("timeout", 600.0, "Seconds one run may take.")
FLAGS = flags.FLAGS


def _run(videos: bool) -> dict:
    """One fresh `train` command: its result.json, with the number of GIFs it wrote."""
    with tempfile.TemporaryDirectory() as root_dir:
        command = [sys.executable, "-m", "alf_async.train", f"--root_dir={root_dir}",
                   *[f"--gin_file={path}" for path in FLAGS.gin_file],
                   f"--gin_param=train.num_env_steps={FLAGS.num_env_steps}",
                   f"--gin_param=train.eval_interval={FLAGS.eval_interval}",
                   f"--gin_param=train.eval_video_interval={int(videos)}",
                   *[f"--gin_param={binding}" for binding in FLAGS.gin_param]]
        subprocess.run(command, check=True, timeout=FLAGS.timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        with open(os.path.join(root_dir, "result.json")) as f:
            result = json.load(f)
        folder = os.path.join(root_dir, "videos")
        result["videos"] = len(os.listdir(folder)) if os.path.isdir(folder) else 0
        return result


def main(argv) -> None:
    del argv
    ratios = []
    for round_ in range(FLAGS.repeats):
        without, with_videos = _run(videos=False), _run(videos=True)
        ratios.append(with_videos["frames_per_sec"] / without["frames_per_sec"])
        print(f"round {round_ + 1}: without videos {without['frames_per_sec']:,.0f} frames/s, "
              f"with {with_videos['frames_per_sec']:,.0f} frames/s "
              f"({with_videos['videos']} videos): ratio {ratios[-1]:.3f}", flush=True)
    print(f"with videos / without: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {FLAGS.repeats} rounds; "
          f"target >= 0.95")


if __name__ == "__main__":
    app.run(main)
