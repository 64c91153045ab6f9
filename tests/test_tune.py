"""`python -m alf_async.tune`: a 3-trial search on a tiny CartPole budget, then resumed."""

import os
import subprocess
import sys

import pytest

optuna = pytest.importorskip("optuna")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["create_environment.num_parallel_environments=16", "train.num_env_steps=None",
        "train.num_iterations=4", "train.summary_interval=1"]
SPACE = """
alf_async.Learner.learning_rate: {low: 1e-4, high: 1e-2, log: true}
alf_async.Learner.num_epochs: {choices: [1, 2]}
"""


def tune(tmp_path, trials):
    return subprocess.run(
        [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
         f"--space={tmp_path / 'space.yaml'}", f"--trials={trials}",
         f"--storage=sqlite:///{tmp_path / 'study.db'}", "--study=tiny", "--startup_trials=1",
         "--seed=0", "--report_steps=2048", "--prune_after=0", *[f"--gin_param={p}" for p in TINY]],
        cwd=ROOT, capture_output=True, text=True, timeout=400)


@pytest.mark.slow
def test_search_with_pruning_then_reopened_adds_trials(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    first = tune(tmp_path, 3)
    assert first.returncode == 0, first.stdout + first.stderr
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'study.db'}")
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 3
    for trial in finished:
        # every trial reported its returns for pruning, at multiples of 2048 env steps
        assert trial.intermediate_values and all(s % 2048 == 0 for s in trial.intermediate_values)
        assert os.path.isdir(trial.user_attrs["root_dir"])
        assert trial.user_attrs["root_dir"] == str(tmp_path / f"trial_{trial.number}")
        assert 1e-4 <= trial.params["alf_async.Learner.learning_rate"] <= 1e-2
    best = study.best_trial
    rate = best.params["alf_async.Learner.learning_rate"]
    assert f"--gin_param='alf_async.Learner.learning_rate={rate}'" in first.stdout
    assert "optuna-dashboard sqlite:///" in first.stdout
    again = tune(tmp_path, 4)
    assert again.returncode == 0, again.stdout + again.stderr
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len([t for t in study.trials if t.state.is_finished()]) == 4
    assert [t.number for t in study.trials] == [0, 1, 2, 3]  # the same study, one trial more


def test_bad_space_and_missing_target_are_one_line_errors(tmp_path):
    (tmp_path / "space.yaml").write_text("a.b: {low: 2, high: 1}\n")
    result = tune(tmp_path, 1)
    assert result.returncode == 2 and "low must be < high" in result.stderr
    assert "Traceback" not in result.stderr
    steps = subprocess.run(
        [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
         f"--space={tmp_path / 'space.yaml'}", f"--storage=sqlite:///{tmp_path / 's.db'}",
         "--objective=steps_to_target"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert steps.returncode == 2 and "needs --target" in steps.stderr
