"""A cell's results are credited only to the settings that made them."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from alf_async.experiments import cells, launcher, report
from alf_async.runs import provenance
from test_report import write_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cell(tmp_path, *bindings, content="train.num_iterations = 3\n"):
    gin = tmp_path / "ppo.gin"
    gin.write_text(content)
    return cells.make_cells([str(gin)], list(bindings), [], target=475.0)[0]


def test_a_rerun_with_other_bindings_is_refused_naming_each_and_rewrites_nothing(tmp_path):
    out = str(tmp_path / "exp")
    first = _cell(tmp_path, "train.num_env_steps=200000")
    launcher.seed_runs([first], [1, 2], out)
    saved = (tmp_path / "exp" / "ppo" / "cell.json").read_text()
    other = _cell(tmp_path, "PPOAlgorithm.entropy_coeff=0.05")
    with pytest.raises(ValueError) as error:
        launcher.seed_runs([other], [1, 2], out)
    assert "binding 'train.num_env_steps=200000' removed" in str(error.value)
    assert "binding 'PPOAlgorithm.entropy_coeff=0.05' added" in str(error.value)
    assert (tmp_path / "exp" / "ppo" / "cell.json").read_text() == saved
    assert launcher.seed_runs([first], [1, 2], out)  # the same settings go on


def test_changed_gin_content_target_or_version_is_a_difference(tmp_path):
    first = dataclasses.asdict(_cell(tmp_path))
    edited = dataclasses.asdict(_cell(tmp_path, content="train.num_iterations = 4\n"))
    assert provenance.differences(first, edited) == ["content of ppo.gin changed"]
    assert provenance.differences(first, dict(first, target=400.0)) == [
        "target 475.0 -> 400.0"]
    assert provenance.differences(dict(first, version="a"), dict(first, version="b")) == [
        "version a -> b"]
    assert provenance.differences(first, first) == []


def test_new_cell_puts_other_settings_beside_the_first(tmp_path):
    out = str(tmp_path / "exp")
    launcher.seed_runs([_cell(tmp_path, "a.b=1")], [1], out)
    runs = launcher.seed_runs([_cell(tmp_path, "a.b=2")], [1], out, new_cell=True)
    assert runs[0].root_dir == os.path.join(out, "ppo-2", "seed_1")
    assert cells.load_cell(os.path.join(out, "ppo")).bindings == ("a.b=1",)
    beside = cells.load_cell(os.path.join(out, "ppo-2"))
    assert beside.bindings == ("a.b=2",)
    # what differs is named with it: in the report's tables and the figure's legend
    assert beside.label == "ppo-2 (vs ppo: binding 'a.b=1' removed; vs ppo: binding 'a.b=2' added)"
    again = launcher.seed_runs([_cell(tmp_path, "a.b=2")], [1], out, new_cell=True)
    assert again[0].root_dir == runs[0].root_dir  # the same settings find their cell


def test_the_report_refuses_a_seed_that_ran_with_other_values(tmp_path):
    cell = cells.Cell("ppo", ("ppo.gin",), ("PPOAlgorithm.entropy_coeff=0.05",), (), 475.0)
    cell.save(str(tmp_path / "exp" / "ppo"))
    run_dir = tmp_path / "exp" / "ppo" / "seed_1"
    write_run(str(run_dir), [(3.0, 1000, 20.0)])
    (run_dir / "operative_config.gin").write_text(
        "# Parameters for PPOAlgorithm:\nPPOAlgorithm.entropy_coeff = 0.0\n")
    with pytest.raises(ValueError, match=r"seed_1 did not run with its cell's settings: "
                       r"PPOAlgorithm.entropy_coeff=0.05 \(ran with 0.0\)"):
        report.write_report([str(tmp_path / "exp")], str(tmp_path / "out"))
    (run_dir / "operative_config.gin").write_text("PPOAlgorithm.entropy_coeff = 0.05\n")
    summary = report.write_report([str(tmp_path / "exp")], str(tmp_path / "out"))
    assert summary["experiments"][0]["cells"][0]["seeds"][0]["seed"] == 1


def test_the_command_refuses_in_one_line_with_exit_2(tmp_path):
    out = tmp_path / "exp"
    launcher.seed_runs(cells.make_cells([os.path.join(ROOT, "gin_configs", "ppo_async.gin")],
                                        ["train.num_env_steps=200000"], []), [1], str(out))
    result = subprocess.run([sys.executable, "-m", "alf_async.experiment", "run",
                             "--gin_file=gin_configs/ppo_async.gin", "--seeds=1",
                             "--gin_param=PPOAlgorithm.entropy_coeff=0.05", f"--out={out}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds seeds made otherwise" in lines[0], result.stderr
    assert "'PPOAlgorithm.entropy_coeff=0.05' added" in lines[0]
    assert json.loads((out / "ppo_async" / "cell.json").read_text())["bindings"] == [
        "train.num_env_steps=200000"]
