"""The forwarder: TensorBoard's scalars against env steps, and a tracker that fails."""

import hashlib
import json
import logging
import os
import threading
import time

import pytest
import tensorflow as tf

from alf_async.runs import provenance
from alf_async.tracking import settings as tracker_settings
from alf_async.tracking.clients import Point
from alf_async.tracking.forwarder import Forwarder, ScalarReader

SETTINGS = tracker_settings.TrackerSettings(kind="mlflow", name="a/run")


def _write(directory, scalars):
    """`scalars`: [(tag, step, value)], written in order to one event file."""
    writer = tf.summary.create_file_writer(str(directory))
    with writer.as_default():
        for tag, step, value in scalars:
            tf.summary.scalar(tag, value, step=step)
    writer.flush()
    writer.close()


def test_the_reader_puts_each_scalar_at_the_env_steps_of_its_iteration(tmp_path):
    reader = ScalarReader(str(tmp_path / "train"))
    assert reader.read() == []  # no folder yet
    _write(tmp_path / "train", [("learner/loss", 1, 0.5),
                                ("Metrics/EnvironmentSteps", 1, 2048),
                                ("Metrics_vs_EnvironmentSteps/AverageReturn", 2048, 20.0),
                                ("learner/loss", 2, 0.25)])
    assert sorted(reader.read()) == sorted([
        Point("learner/loss", 2048, 0.5), Point("Metrics/EnvironmentSteps", 2048, 2048.0),
        Point("Metrics_vs_EnvironmentSteps/AverageReturn", 2048, 20.0)])
    # The loss of iteration 2 waits for iteration 2's env steps, and is read once.
    _write(tmp_path / "train", [("Metrics/EnvironmentSteps", 3, 6144)])
    assert Point("learner/loss", 2048, 0.25) in reader.read()
    _write(tmp_path / "train", [("learner/loss", 4, 0.125)])
    assert reader.read() == []
    assert reader.read(final=True) == [Point("learner/loss", 6144, 0.125)]


def test_a_file_whose_counter_passes_nine_in_the_same_second_is_read(tmp_path):
    """TensorFlow names its event files `<time>.<host>.<pid>.<N>.v2` with a counter N
    for the whole process: its tenth writer in one second makes a file that sorts
    before its ninth by name."""
    reader = ScalarReader(str(tmp_path / "train"))
    for number, counter in enumerate([9, 10], start=1):
        _write(tmp_path / "new", [("Metrics/EnvironmentSteps", number, 2048 * number),
                                  ("Metrics_vs_EnvironmentSteps/AverageReturn",
                                   2048 * number, 10.0 * number)])
        (made,) = (tmp_path / "new").iterdir()
        (tmp_path / "train").mkdir(exist_ok=True)
        made.rename(tmp_path / "train" / f"events.out.tfevents.1795965416.vm.23054.{counter}.v2")
        assert Point("Metrics_vs_EnvironmentSteps/AverageReturn", 2048 * number,
                     10.0 * number) in reader.read()


def test_text_summaries_are_not_scalars(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        tf.summary.text("config/operative_gin", "a = 1", step=0)
        tf.summary.scalar("Metrics_by_env/AverageReturn_env0", 3.0, step=10)
    writer.close()
    assert ScalarReader(str(tmp_path)).read() == [
        Point("Metrics_by_env/AverageReturn_env0", 10, 3.0)]


class FakeTracker:
    """A tracker client in memory that fails while `down`."""

    def __init__(self):
        self.down = False
        self.opened, self.points, self.files, self.params, self.closed = [], [], [], {}, None

    def _call(self):
        if self.down:
            raise ConnectionError("connection refused\nsecond line")

    def open(self, run_id, tags, directory):
        self._call()
        self.opened.append(run_id)
        return run_id or "run-1"

    def log_params(self, params):
        self._call()
        self.params.update(params)

    def log_points(self, points):
        self._call()
        self.points += points

    def log_file(self, path, folder=None):
        self._call()
        self.files.append(os.path.basename(path))

    def close(self, exit_code):
        self._call()
        self.closed = exit_code


def _started_run(root):
    (root / "operative_config.gin").write_text("train.seed = 3\nscope/Learner.learning_rate = 0.001\n")
    (root / "result.json").write_text("{}")
    _write(root / "train", [("Metrics/EnvironmentSteps", 1, 100), ("learner/loss", 1, 1.0)])


def _wait_for(condition, timeout=10.0):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


def test_a_tracker_that_fails_gives_one_warning_and_gets_what_was_kept(tmp_path, caplog):
    _started_run(tmp_path)
    tracker = FakeTracker()
    tracker.down = True
    forwarder = Forwarder(str(tmp_path), tracker, SETTINGS, {"commit": "abc"},
                          interval_secs=0.01, buffer=3)
    with caplog.at_level(logging.INFO, logger="absl"):
        forwarder.start()
        _write(tmp_path / "train", [("Metrics/EnvironmentSteps", 2, 200)] +
               [(f"learner/x{i}", 2, float(i)) for i in range(4)])
        _wait_for(lambda: len(forwarder._pending) == 3 and forwarder._failing)
        time.sleep(0.1)  # many more attempts, still down
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "connection refused" in warnings[0].getMessage()
        assert "second line" not in warnings[0].getMessage()
        tracker.down = False
        _wait_for(lambda: tracker.points)
        assert forwarder.close(0)
    # The newest 3 were kept, the 4 oldest dropped (and counted).
    assert [p.tag for p in tracker.points] == ["learner/x1", "learner/x2", "learner/x3"]
    assert forwarder._dropped == 4
    assert any("works again" in r.getMessage() and "4 oldest dropped" in r.getMessage()
               for r in caplog.records)
    assert tracker.params == {"train.seed": "3", "scope/Learner.learning_rate": "0.001"}
    assert tracker.closed == 0 and "result.json" in tracker.files
    recorded = json.loads((tmp_path / "tracker.json").read_text())
    assert recorded["mlflow"] == "run-1"
    # A resume sends only what was written after: nothing twice.
    again = FakeTracker()
    resumed = Forwarder(str(tmp_path), again, SETTINGS, {}, interval_secs=60)
    resumed.start()
    _write(tmp_path / "train", [("Metrics/EnvironmentSteps", 3, 300), ("learner/x9", 3, 9.0)])
    assert resumed.close(0)
    assert again.opened == ["run-1"]
    assert sorted(again.points) == [Point("Metrics/EnvironmentSteps", 300, 300.0),
                                    Point("learner/x9", 300, 9.0)]


@pytest.mark.parametrize("exit_code,flush_secs", [(1, 60.0), (143, 60.0), (0, 0.5)])
def test_the_end_is_given_up_after_one_warning_when_the_tracker_stays_down(
        tmp_path, caplog, exit_code, flush_secs):
    """A failed or stopped run tries once (a supervisor's stop grace is short); a
    finished one for `flush_secs`."""
    _started_run(tmp_path)
    tracker = FakeTracker()
    tracker.down = True
    forwarder = Forwarder(str(tmp_path), tracker, SETTINGS, {}, interval_secs=60)
    forwarder.start()
    start = time.time()
    with caplog.at_level(logging.WARNING, logger="absl"):
        assert not forwarder.close(exit_code, flush_secs=flush_secs)
    assert time.time() - start < 5
    assert tracker.closed is None and len(caplog.records) == 2
    last = caplog.records[-1].getMessage()
    assert last.startswith("Tracker mlflow: ") and "were not sent" in last
    assert "run again sends them" in last and len(last) < 200  # one short line


def test_a_finished_run_sends_its_end_once_the_tracker_is_back(tmp_path):
    _started_run(tmp_path)
    tracker = FakeTracker()
    tracker.down = True
    forwarder = Forwarder(str(tmp_path), tracker, SETTINGS, {}, interval_secs=60)
    forwarder.start()
    timer = threading.Timer(1.5, lambda: setattr(tracker, "down", False))
    timer.start()
    assert forwarder.close(0, flush_secs=30)
    timer.join()
    assert tracker.closed == 0 and tracker.points


def test_a_resumed_run_continues_its_tracker_run_and_a_bad_start_makes_none(tmp_path):
    tracker = FakeTracker()
    forwarder = Forwarder(str(tmp_path), tracker, SETTINGS, {}, interval_secs=60)
    forwarder.start()
    assert forwarder.close(2)  # a bad setting: no operative config, no tracker run
    assert tracker.opened == [] and not (tmp_path / "tracker.json").exists()
    tracker_settings.update_run_file(str(tmp_path), mlflow="earlier")
    _started_run(tmp_path)
    forwarder = Forwarder(str(tmp_path), tracker, SETTINGS, {}, interval_secs=60)
    forwarder.start()
    assert forwarder.close(130)
    assert tracker.opened == ["earlier"] and tracker.closed == 130
    assert "policy" not in tracker.files  # only a finished run's policy goes


def test_tracker_settings_pass_to_a_child_command_and_refuse_an_unknown_tracker():
    settings = tracker_settings.TrackerSettings("mlflow", uri="http://127.0.0.1:1")
    assert settings.flags(group="cell", name="cell/seed_1") == [
        "--tracker=mlflow", "--tracker_uri=http://127.0.0.1:1", "--tracker_project=alf_async",
        "--tracker_group=cell", "--tracker_name=cell/seed_1"]
    assert tracker_settings.TrackerSettings().flags() == []
    with pytest.raises(ValueError, match="--tracker must be one of none, mlflow, wandb"):
        tracker_settings.TrackerSettings("neptune").check()


def test_provenance_tags_are_the_cells(tmp_path):
    gin = tmp_path / "a.gin"
    gin.write_text("train.seed = 1\n")
    tags = provenance.run_tags(str(tmp_path), [str(gin)])
    assert tags["gin_sha256"] == hashlib.sha256(b"train.seed = 1\n").hexdigest()
    assert tags["gin_files"] == str(gin) and tags["commit"]


def test_a_long_error_is_cut_at_a_words_end():
    from alf_async.tracking.forwarder import _line  # pylint: disable=import-outside-toplevel
    error = ConnectionError("HTTPConnectionPool(host='127.0.0.1', port=5999): Max retries "
                            "exceeded with url: /api/2.0/mlflow/runs/log-batch (Caused by "
                            "NewConnectionError('Failed to establish a new connection'))\nmore")
    line = _line(error)
    assert line.startswith("ConnectionError: HTTPConnectionPool(host='127.0.0.1'")
    assert line.endswith(" ...") and len(line) <= len("ConnectionError: ") + 124
    assert line[:-4].split()[-1] in error.args[0].split()  # a whole word before the cut
