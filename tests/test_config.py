import os
import subprocess
import sys

import gin
import pytest

from alf_async import config  # noqa: F401  (the configurables the files bind)

from alf_async.training import run as run_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_unwritable_root_dir_is_a_value_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="root_dir=.* is not writable"):
        config.check_writable(str(blocker / "run"))


def test_parse_config_finds_included_configs_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # includes resolve next to the including file, not here
    try:
        config.parse_config([os.path.join(ROOT, "gin_configs", "impala_atari.gin")],
                            ["train.seed=7"])
        # impala_atari.gin includes ppo_atari.gin, which includes ppo_async.gin
        assert gin.query_parameter("create_environment.env_name") == "ALE/Breakout-v5"
        assert gin.query_parameter("AsyncOffPolicyDriver.num_actor_queues") == 1
        assert gin.query_parameter("train.seed") == 7
    finally:
        gin.clear_config()


def test_a_missing_gin_file_is_named_before_gin_reads_anything(tmp_path):
    present = tmp_path / "a.gin"
    present.write_text("train.seed = 3\n")
    missing = str(tmp_path / "ppo_asyn.gin")
    with pytest.raises(ValueError, match=f"^--gin_file={missing} does not exist; "
                       "did you mean .*gin_configs/ppo_async.gin\\?$"):
        config.parse_config([str(present), missing], [])
    gin.clear_config()


def test_no_gin_file_is_refused_with_the_shipped_configs_listed():
    with pytest.raises(ValueError) as error:
        config.check_gin_files([], required=True)
    assert str(error.value).startswith("--gin_file is required: a config from gin_configs/ (")
    assert "ppo_async.gin" in str(error.value) and "dqn_cartpole.gin" in str(error.value)
    config.check_gin_files([], required=False)  # a tool that runs on defaults may


def test_a_far_off_name_gets_no_suggestion(tmp_path):
    with pytest.raises(ValueError, match=r"does not exist$"):
        config.check_gin_files([str(tmp_path / "zzz.gin")])


def test_every_shipped_config_parses_against_what_the_learner_registers():
    """As `python -m alf_async.train` registers the configurables (importing the run), in
    a process of its own: nothing this test process imported before may count. The actor
    imports the run too, so its processes parse them as well."""
    names = sorted(n for n in os.listdir(os.path.join(ROOT, "gin_configs")) if n.endswith(".gin"))
    script = ("import gin, sys\nfrom alf_async import config\nimport alf_async.training.run\n"
              "from alf_async.training.settings import RunSettings\n"
              "for path in sys.argv[1:]:\n"
              "    config.parse_config([path], [])\n"
              "    print(RunSettings().algorithm_class.__name__)\n"
              "    gin.clear_config()\n")
    result = subprocess.run([sys.executable, "-c", script,
                             *[os.path.join(ROOT, "gin_configs", n) for n in names]],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    algorithms = result.stdout.split()
    assert len(algorithms) == len(names) >= 20 and all(a.endswith("Algorithm") for a in algorithms)


@gin.configurable
def _made_with(epochs=4, rate=0.5, name="x", size=8, width=1):
    return epochs, rate, name, size, width


def test_applied_values_are_the_numbers_gin_really_passed_macros_too():
    gin.clear_config()
    try:
        config.parse_config([], ["_made_with.epochs = 6", "_made_with.rate = 0.25",
                                 "_made_with.name = 'y'", "W = 3", "_made_with.size = 16",
                                 "_made_with.width = %W"])
        assert config.parsed_bindings()[0] == "_made_with.epochs = 6"
        assert config.applied_values(["_made_with.epochs=6"]) == {}  # not called yet
        _made_with(size=32)  # the caller's own size: gin did not pass its binding
        applied = config.applied_values(config.parsed_bindings() + ["no_such.setting=1"])
        assert applied == {"_made_with.epochs": 6, "_made_with.rate": 0.25, "W": 3}  # used
    finally:
        gin.clear_config()
