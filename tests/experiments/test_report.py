"""Reports on event files written here, with wall times this test chooses."""

import json
import os

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from alf_async.experiments import cells, report
from alf_async.runs.curves import load_curve
from alf_async.runs.layout import EVAL_RETURN_TAG, RETURN_TAG

T0 = 1_700_000_000.0


def write_run(run_dir, points, start=T0, tag=RETURN_TAG):
    """Writes `[(seconds after start, env steps, average return)]` as the trainer would."""
    os.makedirs(os.path.join(run_dir, "train"))
    with open(os.path.join(run_dir, "train", "events.out.tfevents.1.test.v2"), "wb") as f:
        writer = RecordWriter(f)
        writer.write(event_pb2.Event(wall_time=start, file_version="brain.Event:2")
                     .SerializeToString())
        for seconds, step, value in points:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                tag=tag, tensor=tensor_util.make_tensor_proto(np.float32(value)),
                metadata=summary_pb2.SummaryMetadata(
                    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")))])
            writer.write(event_pb2.Event(wall_time=start + seconds, step=step, summary=summary)
                         .SerializeToString())
        writer.flush()


# seed -> its returns at env steps 1000, 2000, ... (one point every 3 s)
RETURNS = {1: [float("nan"), 20, 480, 490, 500, 495, 498, 500],
           2: [30, 60, 200, 476, 300, 480, 470, 490],
           3: [10, 20, 30, 40, 50, 60, 70, 80],
           4: [100, 478, 490, 499, 500, 500, 500, 500]}


@pytest.fixture
def experiment(tmp_path):
    cell = cells.Cell("ppo", ("ppo.gin",), ("a.b=1",), (), 475.0)
    cell.save(str(tmp_path / "exp" / "ppo"))
    for seed, returns in RETURNS.items():
        write_run(str(tmp_path / "exp" / "ppo" / f"seed_{seed}"),
                  [(3.0 * (i + 1), 1000 * (i + 1), r) for i, r in enumerate(returns)])
    return str(tmp_path / "exp")


def test_curve_leaves_out_points_before_the_first_episode(experiment):
    curve = load_curve(os.path.join(experiment, "ppo", "seed_1"))
    assert list(curve["env_steps"]) == [2000, 3000, 4000, 5000, 6000, 7000, 8000]
    assert curve["seconds"][0] == pytest.approx(6.0)


def test_report_figures_equal_hand_computed_ones(experiment, tmp_path):
    summary = report.write_report([experiment], str(tmp_path / "out"))
    cell = summary["experiments"][0]["cells"][0]
    by_seed = {s["seed"]: s for s in cell["seeds"]}
    assert by_seed[1]["env_steps_to_target"] == 3000 and by_seed[1]["seconds_to_target"] == 9.0
    assert by_seed[2]["env_steps_to_target"] == 4000 and by_seed[2]["seconds_to_target"] == 12.0
    assert by_seed[3]["env_steps_to_target"] is None
    assert by_seed[4]["env_steps_to_target"] == 2000
    # last 25 % of 8000 env steps: the points at 6000, 7000 and 8000
    assert [by_seed[s]["last25_min"] for s in (1, 2, 3, 4)] == [495, 470, 60, 500]
    assert [by_seed[s]["best"] for s in (1, 2, 3, 4)] == [500, 490, 80, 500]
    assert cell["reached"] == 3
    steps = cell["aggregate"]["env_steps_to_target"]
    assert steps["n"] == 3 and steps["median"] == 3000 and steps["iqm"] == 3000
    final = cell["aggregate"]["final"]  # 500, 490, 80, 500: IQM is the mean of 490 and 500
    assert final["median"] == 495 and final["iqm"] == pytest.approx(495)
    assert final["ci95"][0] <= 495 <= final["ci95"][1]
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["experiments"][0]["cells"][0]["aggregate"] == cell["aggregate"]
    assert (tmp_path / "out" / "curves.png").stat().st_size > 10_000
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| ppo | 3/4 (target 475) | 3,000; 3.0k [" in md
    assert "| 2 | 4,000 | 12.0 | 490.0 | 490.0 | 470.0 | 8,000 | 24.0 |" in md  # one cell: unnamed


def test_several_directories_compare_side_by_side(experiment, tmp_path):
    other = tmp_path / "other"
    write_run(str(other / "seed_7"), [(1.0, 500, 5.0), (2.0, 1000, 9.0)])
    summary = report.summarize([experiment, str(other)], target=8.0)
    names = [(e["name"], [c["name"] for c in e["cells"]]) for e in summary["experiments"]]
    assert names == [("exp", ["ppo"]), ("other", ["other"])]
    assert summary["experiments"][1]["cells"][0]["seeds"][0]["env_steps_to_target"] == 1000
    # the target given to the report overrides the one the cell was run with
    assert summary["experiments"][0]["cells"][0]["target"] == 8.0


def test_a_directory_without_runs_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no experiment cells"):
        report.summarize([str(tmp_path / "empty")])


def test_a_resumed_runs_pause_is_not_counted(tmp_path):
    run_dir = str(tmp_path / "seed_1")
    write_run(run_dir, [(3.0, 1000, 10.0), (6.0, 2000, 20.0)])
    # The run was stopped at 6 s and resumed an hour later: a second process, its own file.
    later = T0 + 3600.0
    os.rename(os.path.join(run_dir, "train"), os.path.join(run_dir, "first"))
    write_run(run_dir, [(2.0, 3000, 30.0), (5.0, 4000, 40.0)], start=later)
    os.rename(os.path.join(run_dir, "train", "events.out.tfevents.1.test.v2"),
              os.path.join(run_dir, "first", "events.out.tfevents.2.test.v2"))
    os.rmdir(os.path.join(run_dir, "train"))
    os.rename(os.path.join(run_dir, "first"), os.path.join(run_dir, "train"))
    curve = load_curve(run_dir)
    assert list(curve["env_steps"]) == [1000, 2000, 3000, 4000]
    assert list(curve["seconds"]) == pytest.approx([3.0, 6.0, 8.0, 11.0])


def test_a_chaos_seeds_ledger_goes_into_the_summary_and_the_results_page(experiment, tmp_path):
    ledger = dict(faults={"actor_kill": 2}, restarts={"actor 0": 2}, env_restarts=0,
                  wall_seconds=40.0,
                  seconds_lost=0.0, reached=dict(wall_seconds=33.5, env_steps=3000),
                  processes_left=0, unreadable_checkpoints=0, duplicated_unrolls=0, hangs=0,
                  longest_stop_secs=0.4)
    for seed in RETURNS:
        with open(os.path.join(experiment, "ppo", f"seed_{seed}", "ledger.json"), "w") as f:
            json.dump(ledger, f)
    summary = report.write_report([experiment], str(tmp_path / "out"))
    assert all(s["ledger"] == ledger for s in summary["experiments"][0]["cells"][0]["seeds"])
    page = open(tmp_path / "out" / "results.md").read()
    assert "| ppo | 1 | 40.0 | — | 33.5 (3,000) | 2; 0 | 0, 2; 0 |" in page
    assert "Median wall seconds of the whole command: ppo: 40.0 s." in page


def test_offline_seeds_are_scored_by_evaluation_and_normalized_as_d4rl_does(tmp_path):
    """Random 20, expert 500: a final 260 is 100 * 240 / 480 = 50."""
    cell = cells.Cell("bc", ("bc.gin",), (), ())
    cell.save(str(tmp_path / "exp" / "bc"))
    finals = {1: 260.0, 2: 140.0, 3: 500.0}
    for seed, final in finals.items():
        write_run(str(tmp_path / "exp" / "bc" / f"seed_{seed}"),
                  [(1.0, 100, 30.0), (2.0, 200, final)], tag=EVAL_RETURN_TAG)
    summary = report.write_report([str(tmp_path / "exp")], str(tmp_path / "out"),
                                  normalize=(20.0, 500.0))
    cell_summary = summary["experiments"][0]["cells"][0]
    assert cell_summary["axis"] == "learner iterations"
    assert [s["env_steps"] for s in cell_summary["seeds"]] == [200] * 3  # iterations
    assert [s["normalized"] for s in cell_summary["seeds"]] == pytest.approx([50.0, 25.0, 100.0])
    assert cell_summary["aggregate"]["normalized"]["median"] == pytest.approx(50.0)
    page = (tmp_path / "out" / "results.md").read_text()
    assert "| cell | reached | learner iterations to target" in page
    assert "random 20 and expert 500" in page and "| 1 | — | — | 260.0 | 260.0 |" in page
    with pytest.raises(ValueError, match="two different returns"):
        report.summarize([str(tmp_path / "exp")], normalize=(5.0, 5.0))
