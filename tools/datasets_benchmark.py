"""What datasets cost: recording while training, and learning from one offline.

Prints, in one run on one machine, two ratios (DESIGN.md §5):
  1. recording: end-to-end frames/s of the trainer (`--gin_file`, PPO on
     CartPole by default) with `train.record_dataset` against the same run
     without it, in alternating rounds of fresh drivers (target >= 0.9);
  2. offline: learner updates/s with batches drawn from the recorded dataset
     (`exp_replayer='dataset'`, `--offline_gin_file`, BC by default) against
     the same learner training on one of those batches over and over, its
     ceiling, in alternating slices of one driver (target >= 0.9), in a
     process of its own (the offline config's op threads apply).

    python tools/datasets_benchmark.py --duration=10 --repeats=3
"""

import os
import statistics
import subprocess
import sys
import tempfile

from alf_async.training.gc_policy import imports_uncollected

with imports_uncollected():  # the process as the train command runs it
    import toolkit  # tools/toolkit.py: gin and size flags, rate()

    from absl import app, flags  # pylint: disable=wrong-import-order

    from alf_async.training import assembly
    from alf_async.training.settings import RunSettings

flags.DEFINE_float("duration", 10.0, "Seconds measured per figure.")
flags.DEFINE_float("warmup", 3.0, "Seconds of warm-up before each measurement.")
flags.DEFINE_integer("repeats", 3, "Alternating rounds; the medians are reported.")
flags.DEFINE_list("parts", ["recording", "offline"], "Which ratios to measure.")
flags.DEFINE_integer("slices", 6, "Alternating slices of each offline measurement.")
flags.DEFINE_string("dataset", None, "An RLDS dataset to learn from offline (default: one "
                    "recorded first by the train command, in a process of its own).")
flags.DEFINE_integer("record_steps", 300_000, "Env steps of the dataset recorded for the "
                     "offline part (without --dataset).")
flags.DEFINE_string("offline_gin_file", "gin_configs/bc_cartpole.gin",
                    "The offline config the dataset is learnt from.")
FLAGS = flags.FLAGS


def _frames_per_sec(record_dataset=None) -> float:
    """End-to-end frames/s of one fresh driver and learner (recording or not)."""
    toolkit.parse_gin()
    _, _, driver, _ = assembly.build(
        assembly.run_settings(RunSettings(record_dataset=record_dataset)))
    driver.start()
    try:
        return toolkit.rate(driver.run_async, FLAGS.duration, FLAGS.warmup)
    finally:
        driver.stop()


def _updates_per_sec(dataset: str):
    """`(updates/s from the dataset, updates/s of the learner alone on one batch)`."""
    gin_files, FLAGS.gin_file = FLAGS.gin_file, [FLAGS.offline_gin_file]
    try:
        toolkit.parse_gin([f"DatasetBatches.dataset_dir = {dataset!r}"])
    finally:
        FLAGS.gin_file = gin_files
    _, learner, driver, _ = assembly.build(assembly.run_settings(RunSettings()))
    driver.start()
    try:
        placed = learner.place(driver.get_training_exps())
        tallies = toolkit.alternating_rates(
            {"fed": lambda: (driver.run_async(), 1)[1],
             "alone": lambda: (learner.update(placed), 1)[1]},
            FLAGS.duration, settle=FLAGS.warmup / FLAGS.slices, slices=FLAGS.slices)
        return tallies["fed"].rate, tallies["alone"].rate
    finally:
        driver.stop()


def _recording_ratio(scratch: str) -> None:
    recording, plain = [], []
    for k in range(FLAGS.repeats):
        plain.append(_frames_per_sec())
        recording.append(_frames_per_sec(os.path.join(scratch, f"ds{k}")))
        print(f"round {k + 1}: {plain[-1]:,.0f} frames/s without recording, "
              f"{recording[-1]:,.0f} with ({recording[-1] / plain[-1]:.3f})")
    ratio = statistics.median(r / p for r, p in zip(recording, plain))
    print(f"recording: {statistics.median(recording):,.0f} against "
          f"{statistics.median(plain):,.0f} frames/s end to end: ratio {ratio:.3f} (median)")


def _record(dataset: str, scratch: str) -> None:
    """Records `dataset` with the train command (`--gin_file`, `--record_steps`)."""
    subprocess.run([sys.executable, "-m", "alf_async.train",
                    *[f"--gin_file={g}" for g in FLAGS.gin_file],
                    *[f"--gin_param={p}" for p in FLAGS.gin_param + toolkit.size_bindings()],
                    f"--root_dir={os.path.join(scratch, 'recorder')}",
                    f"--gin_param=train.record_dataset={dataset!r}",
                    f"--gin_param=train.num_env_steps={FLAGS.record_steps}"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _offline_in_own_process(dataset: str) -> None:
    """This benchmark's offline part in a fresh process: TensorFlow's op threads are
    set once a process, and the offline config's (`op_threads`) must apply."""
    keep = [a for a in sys.argv[1:] if not a.startswith(("--parts", "--dataset"))]
    subprocess.run([sys.executable, __file__, *keep, "--parts=offline",
                    f"--dataset={dataset}"], check=True)


def _offline_ratio(dataset: str) -> None:
    fed, alone = zip(*[_updates_per_sec(dataset) for _ in range(FLAGS.repeats)])
    print(f"offline: {statistics.median(fed):,.1f} updates/s from the dataset against "
          f"{statistics.median(alone):,.1f} of the learner alone: ratio "
          f"{statistics.median(f / a for f, a in zip(fed, alone)):.3f} (median)")


def main(argv) -> None:
    del argv
    with tempfile.TemporaryDirectory() as scratch:
        if "recording" in FLAGS.parts:
            _recording_ratio(scratch)
        if "offline" not in FLAGS.parts:
            return
        dataset = FLAGS.dataset or os.path.join(scratch, "ds0")
        if not os.path.isdir(dataset):
            _record(dataset, scratch)
        if "recording" in FLAGS.parts:
            _offline_in_own_process(dataset)
        else:
            _offline_ratio(dataset)


if __name__ == "__main__":
    app.run(main)
