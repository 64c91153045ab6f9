import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_benchmark_smoke_run_reports_every_figure(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "tools/benchmark.py", "--duration=1", "--warmup=0.5", "--repeats=2",
         "--num_parallel_environments=8", "--unroll_length=8", f"--out={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    figures = report["frames_per_sec"]
    assert set(figures) == {"end_to_end", "learner_only", "actor_only", "raw_env", "tf_agents"}
    assert all(value > 0 for value in figures.values()), figures
    assert set(report["ratios"]) == {"end_to_end/learner_only", "actor_only/raw_env",
                                     "end_to_end/tf_agents"}
    assert "end_to_end/tf_agents" in result.stdout
    # Each figure is the median (here: the mean) of its two rounds.
    rounds = report["rounds"]
    assert len(rounds) == 2
    for name, value in figures.items():
        assert value == pytest.approx((rounds[0][name] + rounds[1][name]) / 2), name
    ratio = [r["actor_only"] / r["raw_env"] for r in rounds]
    assert report["ratios"]["actor_only/raw_env"] == pytest.approx(sum(ratio) / 2)


@pytest.mark.slow
def test_remote_benchmark_compares_actor_processes_with_in_process_collection(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "tools/benchmark.py", "--remote=1", "--duration=1", "--warmup=0.5",
         "--num_parallel_environments=8", "--unroll_length=8", f"--out={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    figures, ratios = report["frames_per_sec"], report["ratios"]
    for name in ("actor_only", "remote_actor_only", "end_to_end", "remote_end_to_end"):
        assert figures[name] > 0 and figures[f"{name}_cpu_us_per_frame"] > 0, name
    assert ratios["remote/in_process actor_only"] == pytest.approx(
        figures["remote_actor_only"] / figures["actor_only"])
    assert ratios["transport us/frame (actor_only)"] == pytest.approx(
        figures["remote_actor_only_cpu_us_per_frame"] - figures["actor_only_cpu_us_per_frame"])


@pytest.mark.slow
def test_off_policy_benchmark_counts_optimizer_steps_and_replay_rates(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "tools/benchmark.py", "--gin_file=gin_configs/dqn_cartpole.gin",
         "--off_policy", "--duration=2", "--warmup=3", "--gin_param=ReplayBuffer.min_size=64",
         f"--out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["algorithm"] == "DqnAlgorithm"  # the config's, not the default PPO
    figures, ratios = report["frames_per_sec"], report["ratios"]
    assert set(figures) == {"end_to_end_steps", "learner_only_steps", "insert_env_steps",
                            "sample_windows", "end_to_end_cpu_us_per_step",
                            "learner_only_cpu_us_per_step", "data_path_steps",
                            "data_path_cpu_us_per_step"}
    assert all(value > 0 for value in figures.values()), figures
    # The replay ratio ties them: 32 windows per env step, 128 windows per optimizer step.
    assert figures["sample_windows"] / figures["insert_env_steps"] == pytest.approx(32, rel=0.5)
    assert figures["sample_windows"] / figures["end_to_end_steps"] == pytest.approx(128, rel=0.5)
    assert ratios["end_to_end/learner_only (optimizer steps)"] == pytest.approx(
        figures["end_to_end_steps"] / figures["learner_only_steps"])
    # End to end uses no more CPU than the cores give: its CPU time per step times its
    # steps/s is at most the core count (a little over: timers), and the ceiling is
    # that core count's rate against the learner alone.
    cores = os.cpu_count()
    assert figures["end_to_end_cpu_us_per_step"] * figures["end_to_end_steps"] <= cores * 1.1e6
    ceiling = ratios[f"CPU ceiling of that ratio on {cores} cores"]
    assert ceiling == pytest.approx(cores * 1e6 / figures["end_to_end_cpu_us_per_step"]
                                    / figures["learner_only_steps"])
    assert ceiling >= ratios["end_to_end/learner_only (optimizer steps)"] * 0.9
    # Without a learner to wait for, the data path outruns end to end.
    assert figures["data_path_steps"] > figures["end_to_end_steps"]
    share = ratios["learner CPU / (learner + data path CPU) per step"]
    assert share == pytest.approx(figures["learner_only_cpu_us_per_step"] / (
        figures["learner_only_cpu_us_per_step"] + figures["data_path_cpu_us_per_step"]))
