"""The commands with datasets: `train` and `play` record them, `train` learns from one
offline, and each bad input is one line, exit 2, nothing started or written."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds

from alf_async.runs import curves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--gin_param=create_environment.num_parallel_environments=8",
         "--gin_param=train.num_env_steps=None"]


def _command(module, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _errors(result):
    return [line for line in result.stderr.splitlines() if line.startswith("E")]


def _metadata(directory):
    return tfds.builder_from_directory(str(directory)).info.metadata


@pytest.mark.slow
def test_a_run_records_resumes_into_its_dataset_and_bc_learns_from_it_offline(tmp_path):
    run, dataset = tmp_path / "run", tmp_path / "ds"
    args = ["--gin_file=gin_configs/ppo_async.gin", f"--root_dir={run}", *SMALL,
            f"--gin_param=train.record_dataset='{dataset}'"]
    first = _command("alf_async.train", *args, "--gin_param=train.num_iterations=6")
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = _metadata(dataset)
    assert recorded["producer"]["kind"] == "train"
    assert recorded["producer"]["root_dir"] == str(run)
    assert recorded["producer"]["gin_files"].endswith("gin_configs/ppo_async.gin")
    assert recorded["producer"]["run_settings"]["run"]["record_dataset"] == str(dataset)
    assert recorded["policy_version"] == 6 and len(recorded["weights_digest"]) == 64
    again = _command("alf_async.train", *args, "--gin_param=train.num_iterations=9")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = _metadata(dataset)
    assert resumed["episodes"] > recorded["episodes"] and resumed["policy_version"] == 9
    offline = _command("alf_async.train", "--gin_file=gin_configs/bc_cartpole.gin",
                       f"--root_dir={tmp_path / 'bc'}", f"--gin_param=DatasetBatches.dataset_dir="
                       f"'{dataset}'", "--gin_param=train.num_iterations=40",
                       "--gin_param=train.eval_interval=40")
    assert offline.returncode == 0, offline.stderr[-3000:]
    assert "offline: 1024 windows of 1 of" in offline.stderr
    assert "'env_steps': 0" in offline.stderr  # nothing collected was learnt from
    assert "Evaluation at iteration 40: average return" in offline.stderr
    for root, axis in [(run, "env steps"), (tmp_path / "bc", "learner iterations")]:
        # one final score: result.json's is the last point of the run's score curve
        with open(root / "result.json") as f:
            final = json.load(f)["average_return"]
        assert curves.score_axis(str(root)) == axis
        assert final == curves.load_curve(str(root))["value"][-1]
    evaluated = float(offline.stderr.split("Evaluation at iteration 40: average return ")[1]
                      .split()[0])
    assert final == pytest.approx(evaluated, abs=0.05)  # offline: scored by its evaluation
    bad = _command("alf_async.train", "--gin_file=gin_configs/ppo_async.gin",
                   f"--root_dir={tmp_path / 'other'}", *SMALL,
                   f"--gin_param=train.record_dataset='{dataset}'",
                   "--gin_param=train.num_iterations=2")
    assert bad.returncode == 2
    assert [e.split("] ", 1)[1] for e in _errors(bad)] == [
        f"Bad setting: train.record_dataset={dataset} already holds another dataset "
        f"(recorded by train of {run}): give a new directory"]
    assert not (tmp_path / "other").exists()
    played = _command("alf_async.play", f"--root_dir={run}", "--num_episodes=6",
                      f"--record_dataset={tmp_path / 'played'}", "--epsilon=1")
    assert played.returncode == 0, played.stderr[-3000:]
    assert "wrote 6 episodes" in played.stdout
    assert "over 6 epsilon-greedy (1) episodes" in played.stdout
    metadata = _metadata(tmp_path / "played")
    assert metadata["producer"]["kind"] == "play" and metadata["producer"]["epsilon"] == 1.0
    assert metadata["episodes"] == 6 and len(metadata["weights_digest"]) == 64


@pytest.mark.parametrize("args, message", [
    (["--gin_file=gin_configs/bc_cartpole.gin", "--gin_param=DatasetBatches.dataset_dir='{tmp}/none'"],
     "Bad setting: DatasetBatches.dataset_dir={tmp}/none is not a dataset directory (no "
     "dataset_info.json there)"),
    pytest.param(["--gin_file=gin_configs/bc_cartpole.gin"],
                 "Bad setting: DatasetBatches.dataset_dir is needed to learn from a dataset",
                 marks=pytest.mark.slow),
])
def test_a_missing_dataset_is_one_line_exit_2_and_nothing_written(tmp_path, args, message):
    result = _command("alf_async.train", f"--root_dir={tmp_path / 'run'}",
                      *[a.format(tmp=tmp_path) for a in args])
    assert result.returncode == 2, result.stderr[-3000:]
    assert [e.split("] ", 1)[1] for e in _errors(result)] == [message.format(tmp=tmp_path)]
    assert not (tmp_path / "run").exists()
