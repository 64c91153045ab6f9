"""`events`: typed run events, written whole per process and read in time order."""

import json
import os
import subprocess
import sys
import time

import gin
import pytest

from alf_async import events
from alf_async.training import run as run_lib
from alf_async.training.settings import RunSettings
from fakes import read_scalars


@pytest.fixture(autouse=True)
def no_event_log():
    yield
    events.configure(None, "")


def test_each_process_writes_a_file_of_its_own_and_readers_get_them_in_time_order(tmp_path):
    learner = events.EventLog(str(tmp_path), "learner", pid=11)
    actor = events.EventLog(str(tmp_path), "actor 0", pid=12)
    first = learner.emit("resumed", iteration=3, env_steps=300)
    actor.emit("env_exception_survived", env="EnvThread1", error="RuntimeError('x')")
    learner.emit("stopped", status=143)
    assert sorted(os.listdir(tmp_path / "events")) == ["actor_0-12.jsonl", "learner-11.jsonl"]
    read = events.read_events(str(tmp_path))
    assert [(e["process"], e["event"]) for e in read] == [
        ("learner", "resumed"), ("actor 0", "env_exception_survived"), ("learner", "stopped")]
    assert read[0] == first and read[0]["iteration"] == 3 and read[0]["pid"] == 11
    lines = (tmp_path / "events" / "learner-11.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["resumed", "stopped"]


def test_an_unknown_event_or_other_fields_are_refused(tmp_path):
    log = events.EventLog(str(tmp_path), "learner")
    with pytest.raises(ValueError, match="unknown run event 'resume'; known: started, resumed"):
        log.emit("resume", iteration=1, env_steps=2)
    with pytest.raises(ValueError, match=r"'stopped' carries \['status'\], got \['code'\]"):
        events.emit("stopped", code=1)  # checked even with no log configured
    assert not (tmp_path / "events").exists()


def test_a_file_rotates_after_its_limit_and_a_torn_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "MAX_PER_FILE", 2)
    log = events.EventLog(str(tmp_path), "launch", pid=7)
    for restart in range(1, 6):
        log.emit("restarted", child="actor 0", reason="signal SIGKILL", restart=restart,
                 delay_secs=0.0)
    assert sorted(os.listdir(tmp_path / "events")) == [
        "launch-7.1.jsonl", "launch-7.2.jsonl", "launch-7.jsonl"]
    with open(tmp_path / "events" / "launch-7.2.jsonl", "a") as torn:
        torn.write('{"time": 1')
    assert [e["restart"] for e in events.read_events(str(tmp_path))] == [1, 2, 3, 4, 5]


def _returns():
    pass


def _exits_2():
    raise SystemExit(2)


def _fails():
    raise ZeroDivisionError


@pytest.mark.parametrize("body, status", [(_returns, 0), (_exits_2, 2), (_fails, 1)])
def test_a_lifetime_is_started_then_stopped_with_the_exit_status(tmp_path, body, status):
    try:
        with events.lifetime(str(tmp_path), "actor 1", "actor"):
            body()
    except (SystemExit, ZeroDivisionError):
        assert status
    read = events.read_events(str(tmp_path))
    assert [(e["event"], e.get("command"), e.get("status")) for e in read] == [
        ("started", "actor", None), ("stopped", None, status)]


def test_a_root_dir_removed_after_the_first_event_is_not_made_again(tmp_path):
    root = tmp_path / "run"
    log = events.EventLog(str(root), "learner")
    log.emit("started", command="train")
    for path in sorted(root.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    root.rmdir()  # a run that failed at its start removes the folder it made
    log.emit("stopped", status=2)
    assert not root.exists()


@pytest.mark.slow  # two training runs end to end
def test_the_learner_records_its_checkpoints_its_resume_and_the_settings_it_trains_with(
        tmp_path):
    """The resumed run is given a new learning rate: the checkpoint holds the old one in
    the optimizer's variable, and the run must report (and use) the new one."""
    root = str(tmp_path / "run")
    events.configure(root, "learner")
    gin.bind_parameter("alf_async.Learner.learning_rate", 1e-3)
    run_lib.train(root, RunSettings(num_iterations=2, num_env_steps=None, checkpoint_interval=1,
                                    summary_interval=1))
    gin.bind_parameter("alf_async.Learner.learning_rate", 2.5e-4)
    try:
        result = run_lib.train(root, RunSettings(num_iterations=3, num_env_steps=None,
                                                 checkpoint_interval=1, summary_interval=1))
    finally:
        gin.clear_config()
    every = events.read_events(root)
    read = [(e["event"], e.get("iteration")) for e in every if e["event"] != "progress"]
    progress = [e["iteration"] for e in every if e["event"] == "progress"]
    assert progress and set(progress) <= {1, 2, 3} and progress[-1] == 3  # its console lines
    assert read == [("trains_with", 0), ("checkpointed", 1), ("checkpointed", 2),
                    ("checkpointed", 2), ("weights_saved", 2), ("resumed", 2),
                    ("trains_with", 2), ("checkpointed", 3), ("checkpointed", 3),
                    ("weights_saved", 3)]
    saved = [e["weights"] for e in every if e["event"] == "weights_saved"]
    restored = [e["weights"] for e in every if e["event"] == "trains_with"]
    assert restored[1] == saved[0]  # the resumed run restored what the first one saved
    assert len({restored[0], saved[0], saved[1]}) == 3  # and training changes them
    reported = [e["settings"] for e in every if e["event"] == "trains_with"]
    assert [r["learning_rate"] for r in reported] == pytest.approx([1e-3, 2.5e-4])
    assert set(reported[1]) == {"learning_rate", "entropy_coeff", "discount", "clip_ratio"}
    assert result["learning_rate"] == pytest.approx(2.5e-4)
    used = dict(read_scalars(root)["learner/learning_rate"])  # written by the update itself
    assert used[2] == pytest.approx(1e-3) and used[3] == pytest.approx(2.5e-4)


def test_a_url_root_dir_goes_through_tf_io_gfile():
    """`ram://` stands in for a bucket: written whole, renamed, read back."""
    log = events.EventLog("ram://events_test_run", "learner", pid=5)
    log.emit("checkpointed", iteration=10, env_steps=20480)
    log.emit("stopped", status=0)
    read = events.read_events("ram://events_test_run")
    assert [(e["event"], e["pid"]) for e in read] == [("checkpointed", 5), ("stopped", 5)]


def test_a_local_root_dir_does_not_import_tensorflow(tmp_path):
    """The launch writes events too, and must stop within its bound: no 3-s import."""
    code = ("import sys; from alf_async import events; "
            f"events.configure({str(tmp_path)!r}, 'launch'); events.emit('stopped', status=0); "
            "print(len(events.read_events(" + repr(str(tmp_path)) + ")), "
            "'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["1", "False"]


def test_a_spares_events_start_at_its_promotion_and_an_unpromoted_one_writes_none(tmp_path):
    promoted, unpromoted = tmp_path / "promoted", tmp_path / "unpromoted"
    with events.lifetime(str(promoted), "learner", "train", held=True):
        assert events.read_events(str(promoted)) == []  # running ahead: not started yet
        events.announce()
        events.announce()  # once
    assert [e["event"] for e in events.read_events(str(promoted))] == ["started", "stopped"]
    with pytest.raises(SystemExit):
        with events.lifetime(str(unpromoted), "learner", "train", held=True):
            raise SystemExit(0)  # dropped by its supervisor before the word
    assert events.read_events(str(unpromoted)) == []


def test_an_event_reader_polling_a_run_sees_new_events_and_skips_a_torn_line(tmp_path):
    """What the injector polls every 0.1 s: new events show, a torn line is skipped."""
    learner = events.EventLog(str(tmp_path), "learner", pid=7)
    read = events.EventReader(str(tmp_path))
    assert read() == []
    learner.emit("progress", iteration=1, env_steps=2048, average_return=None)
    mark = time.time()
    assert [e["iteration"] for e in read("progress")] == [1]
    learner.emit("progress", iteration=2, env_steps=4096, average_return=10.0)
    learner.emit("checkpoint_failed", iteration=2, error="ckpt-2 could not be written")
    assert [e["iteration"] for e in read("progress", since=mark)] == [2]
    assert len(read("checkpoint_failed")) == 1 and len(read()) == 3
    with open(tmp_path / "events" / "actor_0-9.jsonl", "w") as torn:
        torn.write('{"time": 1, "event": "started"')  # cut by a crash
    assert len(read()) == 3
