import os
import types

import pytest

from alf_async import events
from alf_async.experiments import launcher


def _launcher(monkeypatch, now):
    monkeypatch.setattr(launcher.time, "time", lambda: now[0])
    runs = [types.SimpleNamespace(name=f"s{i}", finished=lambda: False) for i in range(3)]
    return launcher.Launcher(runs, parallel=1, echo=lambda line: None)


def test_the_eta_counts_the_seeds_left_and_is_left_out_once_they_overrun(monkeypatch):
    now = [1000.0]
    seeds = _launcher(monkeypatch, now)
    assert "ETA" not in seeds.progress_line()  # no seed finished yet: no mean
    seeds._durations = [100.0]  # pylint: disable=protected-access
    seeds._queue.running = {"s1": (None, None, now[0] - 30.0)}  # pylint: disable=protected-access
    assert seeds.progress_line().endswith("ETA 170 s")  # 100 pending + 70 left of the running
    seeds._durations = [100.0, 100.0]  # none pending  # pylint: disable=protected-access
    now[0] += 80.0  # the last seed runs longer than the mean
    assert "ETA" not in seeds.progress_line()


def test_a_chaos_cells_seed_runs_the_chaos_command_and_is_done_with_its_ledger(tmp_path):
    from alf_async.experiments import cells
    cell = cells.make_cells(["c.gin"], ["train.seed_free=1", "--rounds=2"],
                            ["--faults=[all]"], runner="chaos")[0]
    run = launcher.seed_runs([cell], [7], str(tmp_path))[0]
    command = run.command(tf_threads=1)
    assert command[1:3] == ["-m", "alf_async.chaos"]
    assert command[3:] == [f"--root_dir={run.root_dir}", "--gin_file=c.gin",
                           "--gin_param=train.seed_free=1", "--seed=7", "--rounds=2",
                           "--faults=all"]
    os.makedirs(run.root_dir)
    open(os.path.join(run.root_dir, "result.json"), "w").close()  # the learner's: not done
    assert not run.finished()
    open(os.path.join(run.root_dir, "ledger.json"), "w").close()
    assert run.finished()


def test_a_failed_seeds_line_is_its_typed_failed_event_else_its_logs_last_line(tmp_path):
    log, root = tmp_path / "train.log", str(tmp_path)
    assert launcher.error_line(root) == "no log"
    log.write_text("I1129 10:00:00.000 7 train.py:99] Imports: 2.00 s\n"
                   "E1129 10:00:01.000 7 train.py:106] Bad gin configuration: no file x.gin\n")
    assert launcher.error_line(root) == "Bad gin configuration: no file x.gin"  # absl's prefix cut
    with open(log, "a") as f:
        f.write("Traceback (most recent call last):\nKeyError: 'a] b'\n")  # a crash: its last line
    assert launcher.error_line(root) == "KeyError: 'a] b'"
    events.EventLog(root, "learner").emit("failed", error="Bad setting: env_name='NoSuchEnv-v0'")
    with open(log, "a") as f:
        f.write("E1129 10:00:09.000 7 actor.py:50] actor task 0 stopped: the run ended\n")
    assert launcher.error_line(root) == "Bad setting: env_name='NoSuchEnv-v0'"  # not the log's


class _Recording:
    """A placement that records each command and whose runs fail at once."""
    retries = 0

    def __init__(self):
        self.commands = {}

    def capacity(self, parallel):
        return parallel

    def tf_threads(self, parallel):
        return 1

    def start(self, name, command, root_dir, relay=False):
        self.commands[name] = command
        return types.SimpleNamespace(poll=lambda: 1, returncode=1, lost=None)

    def forget(self, process):
        pass


@pytest.mark.parametrize("runner", ["train", "chaos", "pbt"])
def test_every_runners_seed_reports_to_the_tracker_in_its_cells_group(tmp_path, runner):
    from alf_async.experiments import cells
    from alf_async.tracking.settings import TrackerSettings
    cell = cells.make_cells(["c.gin"], [], [], runner=runner)[0]
    runs = launcher.seed_runs([cell], [1, 2], str(tmp_path))
    placement = _Recording()
    launcher.Launcher(runs, parallel=2, poll_secs=0.0, echo=lambda line: None,
                      tracker=TrackerSettings("mlflow", uri="http://127.0.0.1:5000"),
                      placement=placement).run()
    for run in runs:
        tracked = [a for a in placement.commands[run.name] if a.startswith("--tracker")]
        assert tracked == ["--tracker=mlflow", "--tracker_uri=http://127.0.0.1:5000",
                           "--tracker_project=alf_async", f"--tracker_group={cell.name}",
                           f"--tracker_name={run.name}"]
