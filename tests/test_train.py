"""`python -m alf_async.train`: its flags are checked before TensorFlow is imported."""

import os
import subprocess
import sys

import pytest

from alf_async import events

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def no_tensorflow(tmp_path):
    """An environment in which importing TensorFlow fails: a command that reports
    its flag error there has not imported it."""
    fake = tmp_path / "fake_site" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('tensorflow imported')\n")
    return dict(os.environ, PYTHONPATH=str(fake.parent))


def command(module, args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("module", ["alf_async.train", "alf_async.actor", "alf_async.play",
                                    "alf_async.launch", "alf_async.experiment",
                                    "alf_async.tune"])
def test_help_exits_0_without_importing_tensorflow(module, no_tensorflow):
    result = command(module, ["--help"], no_tensorflow)
    assert result.returncode == 0, result.stderr
    assert "--gin_file" in result.stdout or module == "alf_async.play"
    assert "--root_dir" in result.stdout or module in ("alf_async.actor", "alf_async.experiment",
                                                       "alf_async.tune")


def test_help_opens_with_what_the_command_does(no_tensorflow):
    result = command("alf_async.train", ["--help"], no_tensorflow)
    assert result.stdout.lstrip().startswith("Trains an agent as its gin config says")


def test_no_gin_file_is_one_line_naming_it_and_the_shipped_configs(no_tensorflow, tmp_path):
    result = command("alf_async.train", [f"--root_dir={tmp_path / 'run'}"], no_tensorflow)
    assert result.returncode == 2
    line = _one_line(result)
    assert "--gin_file is required" in line and "ppo_async.gin" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("module,args", [
    ("alf_async.train", ["--root_dir=runs/never"]),
    ("alf_async.actor", ["--server=127.0.0.1:1", "--task=0"])])
def test_a_mistyped_gin_file_gets_did_you_mean(module, args, no_tensorflow):
    result = command(module, [*args, "--gin_file=gin_configs/ppo_asyn.gin"], no_tensorflow)
    assert result.returncode == 2
    assert _one_line(result).endswith(
        "--gin_file=gin_configs/ppo_asyn.gin does not exist; did you mean "
        "gin_configs/ppo_async.gin?")


def test_play_without_a_complete_policy_is_one_line_and_exit_2(tmp_path, no_tensorflow):
    (tmp_path / "policy" / "variables").mkdir(parents=True)  # what a kill mid-export left
    (tmp_path / "policy" / "saved_model.pb").write_bytes(b"")
    result = command("alf_async.play", [f"--root_dir={tmp_path}"], no_tensorflow)
    assert result.returncode == 2
    assert "No complete exported policy in" in _one_line(result)
    missing = command("alf_async.play", [f"--root_dir={tmp_path / 'none'}"], no_tensorflow)
    assert missing.returncode == 2 and "No complete exported policy" in _one_line(missing)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_run_that_fails_at_its_start_leaves_no_root_dir(tmp_path):
    root = tmp_path / "run"
    result = command("alf_async.train", [
        f"--root_dir={root}", "--gin_file=gin_configs/ppo_async.gin",
        "--gin_param=create_environment.env_name='NoSuchEnv-v0'"], timeout=150)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Bad setting:" in result.stderr and "NoSuchEnv-v0" in result.stderr
    assert not root.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    again = command("alf_async.train", [
        f"--root_dir={kept}", "--gin_file=gin_configs/ppo_async.gin",
        "--gin_param=create_environment.env_name='NoSuchEnv-v0'"], timeout=150)
    assert again.returncode == 2 and kept.is_dir()  # a folder the user made stays
    failed = [e["error"] for e in events.read_events(str(kept)) if e["event"] == "failed"]
    assert len(failed) == 1 and failed[0].startswith("Bad setting:") and "NoSuchEnv-v0" in failed[0]


@pytest.mark.parametrize("tf_config", [
    "{not json", '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 1}}',
    '{"cluster": {"worker": ["h"]}, "task": {"type": "worker", "index": 0}}'])
def test_a_bad_tf_config_is_one_line_before_tensorflow(tf_config, no_tensorflow, tmp_path):
    result = command("alf_async.train", [f"--root_dir={tmp_path / 'run'}",
                                         "--gin_file=gin_configs/ppo_async.gin",
                                         f"--tf_config={tf_config}"], no_tensorflow)
    assert result.returncode == 2
    assert "Bad setting: --tf_config must be TF_CONFIG's JSON" in _one_line(result)
    assert not (tmp_path / "run").exists()


def test_a_missing_root_dir_is_one_line_and_exit_2(no_tensorflow):
    result = command("alf_async.train", ["--gin_file=gin_configs/ppo_async.gin"], no_tensorflow)
    assert result.returncode == 2
    assert "--root_dir is required" in _one_line(result)


def test_an_unknown_tracker_is_one_line_and_exit_2(no_tensorflow, tmp_path):
    result = command("alf_async.train", ["--gin_file=gin_configs/ppo_async.gin",
                                         f"--root_dir={tmp_path / 'run'}", "--tracker=neptune"],
                     no_tensorflow)
    assert result.returncode == 2
    assert "--tracker must be one of none, mlflow, wandb" in _one_line(result)
    assert not (tmp_path / "run").exists()


def test_list_configs_names_every_shipped_config_and_the_extras_it_needs(no_tensorflow):
    result = command("alf_async.train", ["--list_configs"], no_tensorflow)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    shipped = sorted(n for n in os.listdir(os.path.join(ROOT, "gin_configs")) if n.endswith(".gin"))
    assert sorted(lines) == shipped
    assert "PPO on CartPole-v1 with the asynchronous driver." in lines["ppo_async.gin"]
    assert "needs" not in lines["ppo_async.gin"]
    # a header over two lines is listed to its sentence's end, not cut at the line's
    assert ("feeding one prioritized replay whose priorities the learner writes back "
            "(dqn_cartpole_prioritized.gin).  [needs" in lines["dqn_apex.gin"])
    assert lines["sac_mujoco.gin"].endswith("[needs .[mujoco], .[replay]]")
    assert lines["ppo_remote.gin"].endswith("[needs .[replay]]")  # actor processes: Reverb
    assert lines["dqn_minatar.gin"].endswith("[needs .[minatar], .[replay]]")


def test_an_mlflow_server_that_does_not_answer_is_one_line_before_anything_starts(
        tmp_path, no_tensorflow):
    import portpicker  # pylint: disable=import-outside-toplevel
    uri = f"http://127.0.0.1:{portpicker.pick_unused_port()}"
    args = [f"--root_dir={tmp_path / 'run'}", "--gin_file=gin_configs/ppo_async.gin",
            "--tracker=mlflow", f"--tracker_uri={uri}"]
    result = command("alf_async.train", args, no_tensorflow)
    assert result.returncode == 2
    line = _one_line(result)
    assert f"--tracker_uri={uri}: no MLflow server answers there (" in line
    assert "refused" in line and line.endswith("or fix the URI")
    assert not (tmp_path / "run").exists()
    from alf_async.tracking.settings import TrackerSettings  # pylint: disable=import-outside-toplevel
    # a seed of an experiment (a run of a group) was checked by the experiment, and a
    # resumed run already reported: neither asks the server (sends are retried)
    TrackerSettings("mlflow", uri, group="cell").check()
    TrackerSettings("mlflow", uri).check(contact=False)
    with pytest.raises(ValueError, match="no MLflow server answers"):
        TrackerSettings("mlflow", uri).check()
