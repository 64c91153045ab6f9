"""A config whose extra is missing ends with one line naming our extra, exit 2."""

import os
import subprocess
import sys

import pytest

from alf_async import extras
from alf_async.errors import MissingExtraError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_env_ids_map_to_our_extras():
    assert extras.env_extra("HalfCheetah-v4") == "mujoco"
    assert extras.env_extra("LunarLander-v2") == "box2d"
    assert extras.env_extra("ALE/Pong-v5") == "atari"
    assert extras.env_extra("MinAtar/Breakout-v1") == "minatar"
    assert extras.env_extra("CartPole-v1") is None and extras.env_extra("Nope-v0") is None


def test_require_names_the_setting_and_the_extra():
    with pytest.raises(MissingExtraError, match=r"^x=1 needs the \[replay\] extra: "
                                                r"pip install '\.\[replay\]'$"):
        extras.require("no_such_module_here", "replay", "x=1")
    assert extras.require("json", "none", "x").dumps([]) == "[]"


@pytest.mark.parametrize("config, blocked, line", [
    ("sac_pendulum.gin", "reverb", "AsyncOffPolicyDriver.exp_replayer='uniform' needs the "
                                   "[replay] extra: pip install '.[replay]'"),
    ("ppo_mujoco.gin", "mujoco", "create_environment.env_name='HalfCheetah-v4' needs the "
                                 "[mujoco] extra: pip install '.[mujoco]'"),
])
@pytest.mark.slow
def test_a_config_without_its_extra_is_one_line_and_exit_2(tmp_path, config, blocked, line):
    # A package on the path ahead of the real one that fails to import, as a
    # missing one does after the README's plain `pip install .`.
    (tmp_path / "block" / blocked).mkdir(parents=True)
    (tmp_path / "block" / blocked / "__init__.py").write_text(
        f"raise ImportError({'No module named ' + blocked!r}, name={blocked!r})\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "block"))
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.train", f"--gin_file=gin_configs/{config}",
         f"--root_dir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=180)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "gymnasium[" not in result.stderr
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and errors[0].endswith(f"Missing package: {line}"), errors
    assert not (tmp_path / "run").exists()  # the run made it and never started: removed


def test_a_trajectory_dataset_reads_its_table_without_autotuning():
    """No tf.data model thread beside the iterator: destroying an iterator waits for
    the thread its root started, holding the GIL (the learner stood still 15-35 s at
    the end of training)."""
    reverb = pytest.importorskip("reverb")
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    server = reverb.Server([reverb.Table.queue(
        "q", 4, signature={"x": tf.TensorSpec([1], tf.float32)})])
    try:
        address = f"localhost:{server.port}"
        with reverb.Client(address).trajectory_writer(1) as writer:
            writer.append({"x": np.float32(7)})
            writer.create_item("q", 1.0, {"x": writer.history["x"][-1:]})
        dataset = extras.trajectory_dataset(reverb, address, "q",
                                            max_in_flight_samples_per_worker=1)
        assert dataset.options().autotune.enabled is False
        assert next(iter(dataset)).data["x"].numpy().tolist() == [7.0]
    finally:
        server.stop()
