"""`python -m alf_async.chaos`: its progress axis, bad input, and a short chaos
run (slow) whose ledger must be clean."""

import json
import os
import subprocess
import sys

import pytest

from alf_async.chaos import faults
from alf_async.chaos import run as chaos
from test_chaos_ledger import EVENTS, _event

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("flag, line", [
    ("--faults=env_exception,meteor", "unknown fault kind 'meteor'"),
    ("--faults=node_loss", "unknown fault kind 'node_loss' (needs --backend=ray)"),
    ("--env_fault_p=1.5", "--env_fault_p must be in [0, 1], got 1.5"),
    ("--actors=0", "--actors must be >= 1, got 0"),
    ("--actor_nodes=0", "--actor_nodes must be >= 1, got 0"),
    ("--mean_interval_env_steps=-1", "--mean_interval_env_steps must be >= 0, got -1"),
    ("--mean_interval_env_steps=5000", "--mean_interval_env_steps needs --rounds >= 1"),
    ("--tracker=tensorboard", "--tracker must be one of none, mlflow, wandb")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flag, line):
    result = subprocess.run([sys.executable, "-m", "alf_async.chaos", f"--root_dir={tmp_path}",
                             flag], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and line in errors[0]
    assert not os.path.exists(tmp_path / "launch.log")  # nothing was started


def test_the_tracker_flags_go_on_to_the_launch_whose_learner_reports():
    """The flags are defined when the command runs (`_define_flags`): read in a process
    of their own, beside no other command's flags."""
    code = ("import json, sys; from absl import flags; from alf_async.chaos import run as chaos; "
            "chaos._define_flags(); flags.FLAGS(sys.argv); "
            "print(json.dumps(chaos._launch_command(['none'])))")
    result = subprocess.run([sys.executable, "-c", code, "--root_dir=r", "--tracker=mlflow",
                             "--tracker_group=c", "--tracker_name=c/seed_1"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    command = json.loads(result.stdout)
    assert command[1:3] == ["-m", "alf_async.launch"]
    assert [a for a in command if a.startswith("--tracker")] == [
        "--tracker=mlflow", "--tracker_project=alf_async", "--tracker_group=c",
        "--tracker_name=c/seed_1"]


def test_progress_in_env_steps_is_the_most_any_learner_logged():
    """A schedule over env steps gives every run all its rounds however fast it goes;
    a learner resumed from an older checkpoint logs fewer steps again: no going back."""
    assert chaos.progress_env_steps(EVENTS) == 51200  # not the resumed learner's 43008
    later = _event(40.0, "learner", "progress", iteration=30, env_steps=61440, average_return=0)
    assert chaos.progress_env_steps(EVENTS + [later]) == 61440
    assert chaos.progress_env_steps([]) == 0


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_short_chaos_run_reaches_475_with_a_clean_ledger(tmp_path):
    ledger_path = tmp_path / "ledger.json"
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.chaos", f"--root_dir={tmp_path / 'run'}", "--seed=11",
         # over env steps: every kind comes however fast the run is (5 kinds, mean
         # 25k apart, well inside the 400k steps)
         "--mean_interval_env_steps=25000", "--rounds=1", "--timeout_secs=330",
         # past the target, so that every kind comes at least once
         "--gin_param=train.stop_at_return=None", "--gin_param=train.num_env_steps=400000",
         f"--ledger={ledger_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    ledger = json.loads(ledger_path.read_text())
    assert result.returncode == 0, (ledger, result.stderr[-3000:])
    assert ledger["reached"] is not None and ledger["exit_status"] == 0
    assert set(ledger["faults"]) == set(faults.KINDS), ledger["faults"]
    assert all(count >= 1 for count in ledger["faults"].values()), ledger["faults"]
    assert ledger["restarts"].get("learner", 0) >= 2  # a kill and a SIGTERM
    for zero in ("processes_left", "unreadable_checkpoints", "duplicated_unrolls", "hangs"):
        assert ledger[zero] == 0, (zero, ledger)
