"""The run's settings records: read from gin once, by assembly only; their JSON file."""

import dataclasses
import os
import re
import subprocess
import sys

import gin
import pytest

from alf_async.algorithms import ImpalaAlgorithm
from alf_async.drivers import DriverSizes
from alf_async.runs import layout, records
from alf_async.training import assembly
from alf_async.training.settings import RunSettings, write_settings
from fakes import gin_bound

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "alf_async")
# Who may read gin's bindings of a setting: assembly (for every component).
GIN_READERS = {"training/assembly.py"}
# Who may open the operative config: its writer; `play`, which parses it back into gin
# to rebuild the run's env (as the command's flags would); the experiment report's
# provenance check, which compares a cell's own gin bindings with it; the tracker's
# forwarder, which sends its bindings as the run's parameters. Values a tool reads
# from a run (env, budget, intervals) come from run_settings.json.
OPERATIVE_CONFIG_READERS = {"training/checkpoints.py", "play.py", "experiments/report.py",
                            "tracking/forwarder.py"}


def _sources():
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, PACKAGE), f.read()


def test_no_module_but_assembly_reads_another_components_setting_through_gin():
    """A setting read sideways by its gin name breaks without an error when it is
    renamed; every reader gets its record from its caller instead."""
    sources = dict(_sources())
    assert len(sources) > 80  # the walk found the package
    readers = {path for path, text in sources.items()
               if re.search(r"gin\.(query_parameter|get_bindings)\(", text)}
    assert readers == GIN_READERS
    operative = {path for path, text in sources.items() if "operative_config.gin" in text}
    assert operative <= OPERATIVE_CONFIG_READERS, operative - OPERATIVE_CONFIG_READERS


def test_the_records_are_built_from_gin_with_the_components_defaults():
    with gin_bound({"AsyncOffPolicyDriver.num_envs": 6,
                    "AsyncOffPolicyDriver.learn_queue_cap": 12,
                    "AsyncOffPolicyDriver.exp_replayer": "uniform",
                    "ReplayBuffer.save_buffer": True,
                    "create_environment.env_name": "Acrobot-v1",
                    "train.algorithm_class": ImpalaAlgorithm,
                    "train.num_env_steps": 5000, "train.seed": 7}):
        settings = assembly.run_settings()
    assert settings.sizes == DriverSizes(num_envs=6, num_actor_queues=1, unroll_length=32,
                                         learn_queue_cap=12, actor_queue_cap=2)
    assert settings.replay.exp_replayer == "uniform" and settings.replay.keeps_state
    assert settings.env.env_name == "Acrobot-v1" and settings.env.num_parallel_environments == 16
    assert settings.run.algorithm_class is ImpalaAlgorithm
    assert (settings.run.num_env_steps, settings.run.seed) == (5000, 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.run.seed = 8  # type: ignore[misc]
    unbound = assembly.run_settings(RunSettings(seed=3))
    assert unbound.run.seed == 3 and unbound.run.num_env_steps == 1_000_000
    assert not unbound.replay.keeps_state


def test_run_settings_json_holds_every_record_and_names_the_algorithm(tmp_path):
    with gin_bound({"train.checkpoint_interval": 25}):
        settings = assembly.run_settings()
    assert layout.read_settings(str(tmp_path)) is None  # not started
    write_settings(str(tmp_path), settings)
    recorded = layout.read_settings(str(tmp_path))
    assert set(recorded) == {"run", "sizes", "replay", "env"}
    assert recorded["run"]["checkpoint_interval"] == 25
    assert recorded["run"]["algorithm_class"] == "PPOAlgorithm"
    assert recorded["sizes"]["unroll_length"] == 32


def test_gin_files_keep_binding_train_as_before():
    """`train.*` in every gin file now binds `RunSettings`; a wrong name is still an error
    naming it."""
    with gin_bound({}):
        gin.parse_config(["train.num_env_steps = 123"])
        assert RunSettings().num_env_steps == 123
        with pytest.raises(ValueError, match="no_such_setting"):
            gin.parse_config(["train.no_such_setting = 1"])


def test_the_recorded_settings_read_back_as_the_same_records_without_tensorflow(tmp_path):
    """`runs.records.read_records`: what the report, the chaos tool and PBT read of a run,
    typed as the run's own records (the algorithm by name), in a process without TF."""
    with gin_bound({"train.checkpoint_interval": 25, "train.seed": 4}):
        settings = assembly.run_settings()
    write_settings(str(tmp_path), settings)
    code = ("import sys; from alf_async.runs import records; "
            f"r = records.read_records({str(tmp_path)!r}); "
            "print(r.algorithm, r.run.checkpoint_interval, r.run.seed, r.sizes.unroll_length, "
            "r.replay.exp_replayer, r.env.env_name, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["PPOAlgorithm", "25", "4", "32", "one_time",
                                     "CartPole-v1", "False"]
    recorded = records.read_records(str(tmp_path))
    assert recorded.sizes == settings.sizes and recorded.env == settings.env
    assert recorded.replay == settings.replay
    assert dataclasses.asdict(recorded.run) == {
        k: v for k, v in dataclasses.asdict(settings.run).items() if k != "algorithm_class"}
    assert records.read_records(str(tmp_path / "not_started")) is None
