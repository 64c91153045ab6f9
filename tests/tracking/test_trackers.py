"""The trackers' real parts: a run through `python -m alf_async.train --tracker=...`
against an MLflow tracking server on 127.0.0.1 (read back with `MlflowClient`),
and Weights & Biases offline (its run files read back)."""

import glob
import hashlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import portpicker
import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIN = os.path.join(ROOT, "gin_configs", "ppo_async.gin")
RETURN = "Metrics_vs_EnvironmentSteps/AverageReturn"


class MlflowServer:
    """`mlflow server` with a SQLite store in `folder`, on 127.0.0.1:`port`."""

    def __init__(self, folder, port):
        self.folder, self.port = str(folder), port
        self.uri = f"http://127.0.0.1:{port}"
        self.process = None

    def start(self, timeout=90):
        os.makedirs(self.folder, exist_ok=True)
        self.process = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server",
             "--backend-store-uri", f"sqlite:///{self.folder}/mlflow.db",
             "--artifacts-destination", f"{self.folder}/artifacts",
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.folder, "server.log"), "a"),
            start_new_session=True)
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            assert self.process.poll() is None, open(f"{self.folder}/server.log").read()[-2000:]
            assert time.time() < deadline, "mlflow server did not answer"
            time.sleep(0.2)

    def stop(self):
        """SIGTERM to its process group (gunicorn's workers too), SIGKILL after 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def mlflow_server(tmp_path):
    server = MlflowServer(tmp_path / "mlflow", portpicker.pick_unused_port())
    server.start()
    yield server
    server.stop()


def _train(root_dir, *args, env=None, budget=4096):
    return [sys.executable, "-m", "alf_async.train", f"--gin_file={GIN}",
            f"--root_dir={root_dir}", f"--gin_param=train.num_env_steps={budget}",
            "--gin_param=train.summary_interval=1", "--tf_threads=1", *args]


def _run(command, env=None, timeout=240):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_mlflow_gets_the_bindings_scalars_files_and_a_resume_continues_the_run(
        mlflow_server, tmp_path, monkeypatch):
    import mlflow
    from mlflow.tracking import MlflowClient

    root = tmp_path / "cell" / "seed_1"
    flags = ["--tracker=mlflow", f"--tracker_uri={mlflow_server.uri}",
             "--tracker_group=cell"]
    _run(_train(root, *flags))
    run_id = json.loads((root / "tracker.json").read_text())["mlflow"]
    _run(_train(root, *flags, "--gin_param=alf_async.Learner.learning_rate=0.001", budget=8192))
    assert json.loads((root / "tracker.json").read_text())["mlflow"] == run_id

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)  # artifacts' reads too
    client = MlflowClient(mlflow_server.uri)
    experiment = client.get_experiment_by_name("alf_async")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2  # the run, resumed in place, and its group's parent
    run = client.get_run(run_id)
    parent = run.data.tags["mlflow.parentRunId"]
    assert client.get_run(parent).data.tags["alf_async.group"] == "cell"
    assert run.info.status == "FINISHED" and run.info.run_name == "cell/seed_1"
    assert run.data.params["train.num_env_steps"] == "4096"
    assert run.data.tags["resumed_with.train.num_env_steps"] == "8192"
    assert run.data.tags["resumed_with.Learner.learning_rate"] == "0.001"
    with open(GIN, "rb") as f:
        assert run.data.tags["gin_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert run.data.tags["commit"]
    steps = sorted(m.step for m in client.get_metric_history(run_id, RETURN))
    assert steps[-1] >= 8192 and all(s % 2048 == 0 for s in steps)
    losses = client.get_metric_history(run_id, "learner/busy")
    assert losses and max(m.step for m in losses) >= 8192  # iterations placed at env steps
    assert sorted((m.step, pytest.approx(m.value)) for m in client.get_metric_history(
        run_id, RETURN)) == _tensorboard(root, RETURN)  # the same scalars, each once
    sent = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="result.json",
                                               dst_path=str(tmp_path),
                                               tracking_uri=mlflow_server.uri)
    assert json.loads(open(sent).read()) == json.loads((root / "result.json").read_text())
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"result.json", "operative_config.gin", "policy"} <= artifacts
    assert "policy/saved_model.pb" in {a.path for a in client.list_artifacts(run_id, "policy")}


def test_a_tracking_server_stopped_mid_run_neither_stops_nor_loses_the_run(
        mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    root = tmp_path / "run"
    log = open(tmp_path / "train.log", "w")
    process = subprocess.Popen(
        _train(root, "--tracker=mlflow", f"--tracker_uri={mlflow_server.uri}",
               budget=150_000), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while not (root / "tracker.json").exists():  # the tracker run is open
            assert process.poll() is None and time.time() < deadline
            time.sleep(0.2)
        mlflow_server.stop()
        time.sleep(3)
        mlflow_server.start()
        assert process.wait(300) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        log.close()
    text = (tmp_path / "train.log").read_text()
    assert text.count("Tracker mlflow failed") == 1, text[-3000:]
    assert "Tracker mlflow works again" in text
    result = json.loads((root / "result.json").read_text())
    run_id = json.loads((root / "tracker.json").read_text())["mlflow"]
    client = MlflowClient(mlflow_server.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run_id, RETURN))
    # every iteration's point, those written while the server was down included
    assert steps == [step for step, _ in _tensorboard(root, RETURN)]
    assert steps[-1] == result["env_steps"]


class ReplyDroppingProxy(http.server.ThreadingHTTPServer):
    """Passes requests on 127.0.0.1 to `upstream`; the first `drops` log-batch requests
    reach the server, which stores them, but their replies are never given back
    (as when a reply times out on a busy server)."""

    def __init__(self, upstream, drops):
        self.upstream, self.drops = upstream, drops
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.uri = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    def _forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = urllib.request.Request(self.server.upstream + self.path, data=body or None,
                                         method=self.command, headers={
                                             "Content-Type": self.headers.get(
                                                 "Content-Type", "application/json")})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                status, data = reply.status, reply.read()
        except urllib.error.HTTPError as error:
            status, data = error.code, error.read()
        if self.path.split("?")[0].endswith("/runs/log-batch") and self.server.drops > 0:
            self.server.drops -= 1
            self.close_connection = True  # stored, but no reply
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _forward

    def log_message(self, *args):
        del args


def test_a_send_the_server_stored_but_never_answered_is_not_stored_twice(mlflow_server):
    from mlflow.tracking import MlflowClient
    from alf_async.tracking.clients import MlflowTracker, Point
    from alf_async.tracking.settings import TrackerSettings

    proxy = ReplyDroppingProxy(mlflow_server.uri, drops=1)
    try:
        tracker = MlflowTracker(TrackerSettings("mlflow", proxy.uri, name="lost_reply"))
        run_id = tracker.open(None, {}, "")
        first = [Point(RETURN, 2048 * i, float(i)) for i in range(1, 6)]
        with pytest.raises(Exception):
            tracker.log_points(first)  # stored by the server, its reply lost
        tracker.log_points(first + [Point(RETURN, 2048 * 6, 6.0)])  # the forwarder's retry
        tracker.log_points([Point(RETURN, 2048 * 7, 7.0)])
    finally:
        proxy.shutdown()
    history = MlflowClient(mlflow_server.uri).get_metric_history(run_id, RETURN)
    assert sorted((m.step, m.value) for m in history) == [(2048 * i, float(i))
                                                           for i in range(1, 8)]


def _tensorboard(root, tag):
    """[(step, value)] of `tag` in the run's TensorBoard summaries."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    accumulator = event_accumulator.EventAccumulator(str(root / "train"),
                                                     size_guidance={"tensors": 0})
    accumulator.Reload()
    return sorted((e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                  for e in accumulator.Tensors(tag))


def _wandb_records(root):
    """(run ids, history rows, config keys, saved files) of every offline W&B run in `root`."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    ids, history, config, saved = [], [], set(), set()
    for path in sorted(glob.glob(os.path.join(root, "wandb", "offline-run-*", "run-*.wandb"))):
        store = datastore.DataStore()
        store.open_for_scan(path)
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.append(record.run.run_id)
                config |= {item.key for item in record.run.config.update}
            elif kind == "config":
                config |= {item.key for item in record.config.update}
            elif kind == "history":
                history.append({item.key or "/".join(item.nested_key):
                                json.loads(item.value_json) for item in record.history.item})
            elif kind == "files":
                saved |= {item.path for item in record.files.files}
    return ids, history, config, saved


def test_wandb_offline_gets_the_scalars_against_env_steps_and_a_resume_keeps_the_id(tmp_path):
    root = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    first = _run(_train(root, "--tracker=wandb", "--tracker_group=g"), env=env)
    assert "Adding directory to artifact" not in first.stderr + first.stdout  # W&B's chatter
    _run(_train(root, "--tracker=wandb", "--tracker_group=g", budget=8192), env=env)
    ids, history, config, saved = _wandb_records(str(root))
    run_id = json.loads((root / "tracker.json").read_text())["wandb"]
    assert ids == [run_id, run_id]  # offline: one folder per start, one run
    returns = [row for row in history if RETURN in row]
    assert returns and max(row["env_steps"] for row in returns) >= 8192
    assert "train.num_env_steps" in config and "provenance" in config
    assert "result.json" in saved


TINY = ["create_environment.num_parallel_environments=16", "train.num_env_steps=None",
        "train.num_iterations=2", "train.summary_interval=1"]


def test_a_cell_a_study_and_a_population_are_parents_of_a_run_per_seed_trial_and_member(
        mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    tracked = ["--tracker=mlflow", f"--tracker_uri={mlflow_server.uri}"]
    tiny = [f"--gin_param={p}" for p in TINY]
    _run([sys.executable, "-m", "alf_async.experiment", "run", f"--gin_file={GIN}",
          "--seeds=1-2", "--parallel=2", f"--out={tmp_path / 'exp'}", *tiny, *tracked])
    (tmp_path / "space.yaml").write_text("alf_async.Learner.num_epochs: {choices: [1, 2]}\n")
    _run([sys.executable, "-m", "alf_async.tune", f"--gin_file={GIN}", "--trials=2",
          f"--space={tmp_path / 'space.yaml'}", f"--storage=sqlite:///{tmp_path / 'db'}",
          "--study=tiny", "--noprune", *tiny, *tracked])
    _run([sys.executable, "-m", "alf_async.pbt", f"--gin_file={GIN}", "--population=2",
          f"--root_dir={tmp_path / 'pop'}", "--interval_env_steps=2048", "--generations=2",
          "--quantile=0.5", "--parallel=2",
          "--mutate=alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)",
          f"--gin_param={TINY[0]}", "--gin_param=train.summary_interval=1", *tracked])
    client = MlflowClient(mlflow_server.uri)
    runs = client.search_runs([client.get_experiment_by_name("alf_async").experiment_id])
    groups = {r.info.run_id: r.data.tags["alf_async.group"] for r in runs
              if "alf_async.group" in r.data.tags}
    children = {r.info.run_name: groups[r.data.tags["mlflow.parentRunId"]] for r in runs
                if r.info.run_id not in groups}
    cell = next(g for g in groups.values() if g not in ("tiny", "pop"))
    assert children == {f"{cell}/seed_1": cell, f"{cell}/seed_2": cell,
                        "tiny/trial_0": "tiny", "tiny/trial_1": "tiny",
                        "pop/member_0": "pop", "pop/member_1": "pop"}
    assert sorted(groups.values()) == sorted([cell, "tiny", "pop"])  # one parent each
    members = [r for r in runs if r.info.run_name.startswith("pop/member_")]
    assert len(members) == 2  # a member's second interval resumed its run
    for member in members:
        steps = [m.step for m in client.get_metric_history(member.info.run_id, RETURN)]
        assert steps and max(steps) > 2048  # points of both intervals in the one run
    assert all(r.info.status == "FINISHED" for r in runs if r.info.run_id not in groups)
