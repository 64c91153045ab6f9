"""A search's workers: their command, the SQLite rule, and restarts (deterministic fakes)."""

import signal
import sys

import pytest

from alf_async.experiments import workers


def test_a_worker_runs_the_same_tune_command_here_one_trial_at_a_time():
    argv = ["tune.py", "--gin_file=a.gin", "--backend=ray", "--address=1.2.3.4:6379",
            "--workers=4", '--worker_resources={"CPU": 2}', "--parallel=3", "--trials=9",
            "--out=elsewhere", "--tracker=mlflow"]
    command = workers.worker_command(argv, "/shared/out", tf_threads=2)
    assert command[:3] == [sys.executable, "-m", "alf_async.tune"]
    assert command[3:] == ["--gin_file=a.gin", "--trials=9", "--tracker=mlflow",
                           "--backend=local", "--parallel=1", "--tf_threads=2",
                           "--out=/shared/out", "--nosummary"]


@pytest.mark.parametrize("storage,count,nodes,refused", [
    ("sqlite:///s.db", 2, 2, True), ("sqlite:///s.db", 2, 1, False),
    ("sqlite:///s.db", 1, 5, False), ("postgresql://u@127.0.0.1/db", 8, 5, False)])
def test_sqlite_is_refused_only_for_workers_that_may_run_on_several_nodes(
        storage, count, nodes, refused):
    if refused:
        with pytest.raises(ValueError, match="SQLite is for one host, and --workers=2 may "
                                             "run on any of the Ray cluster's 2 nodes"):
            workers.check_storage(storage, count, nodes)
    else:
        workers.check_storage(storage, count, nodes)


class _Worker:
    def __init__(self, code, lost=None):
        self.code, self.lost, self.returncode, self.address = code, lost, None, "127.0.0.7"

    def poll(self):
        self.returncode = self.code
        return self.code


class _Placement:
    retries = 2

    def __init__(self, codes):
        self.codes, self.started = dict(codes), []

    def start(self, name, command, root_dir, relay=False):
        assert relay  # a worker's lines reach the console
        self.started.append(name)
        return _Worker(*self.codes[name].pop(0))

    def forget(self, process):
        pass


def test_a_dead_or_lost_worker_starts_again_within_its_retries_one_line_each(capsys, tmp_path):
    placement = _Placement({"worker_0": [(0,)],
                            "worker_1": [(-signal.SIGKILL,), (-signal.SIGKILL, "RayActorError"),
                                         (0,)]})
    assert workers.run_workers(placement, ["tune"], 2, str(tmp_path), poll_secs=0) == 0
    assert placement.started.count("worker_1") == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "tune: worker_1 on 127.0.0.7 ended, it died (exit -9); started again (retry 1 of 2); "
        "its trial is marked failed and queued again once its heartbeat is overdue",
        "tune: worker_1 on 127.0.0.7 ended, its node was lost (RayActorError); started again "
        "(retry 2 of 2); its trial is marked failed and queued again once its heartbeat is "
        "overdue"]


def test_a_worker_dead_past_its_retries_makes_the_search_fail(tmp_path):
    placement = _Placement({"worker_0": [(-signal.SIGKILL,)] * 3})
    assert workers.run_workers(placement, ["tune"], 1, str(tmp_path), poll_secs=0) == 1
    assert len(placement.started) == 3


def test_a_local_tune_worker_that_dies_is_started_again_within_worker_retries():
    """docs/experiments.md's promise held for --backend=local too (it was Ray's only)."""
    import subprocess  # pylint: disable=import-outside-toplevel
    code = ("import sys; from absl import flags; from alf_async import tune; "
            "from alf_async.supervision import backends; flags.FLAGS(sys.argv); "
            "print(backends.placement_from_flags('worker', '/tmp', 'tune').retries)")
    result = subprocess.run([sys.executable, "-c", code, "--backend=local", "--worker_retries=2"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "2"
