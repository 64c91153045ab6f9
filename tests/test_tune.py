"""`python -m alf_async.tune`: a 3-trial search on a tiny CartPole budget, then resumed."""

import os
import signal
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["create_environment.num_parallel_environments=16", "train.num_env_steps=None",
        "train.num_iterations=4", "train.summary_interval=1"]
SPACE = """
alf_async.Learner.learning_rate: {low: 1e-4, high: 1e-2, log: true}
alf_async.Learner.num_epochs: {choices: [1, 2]}
"""


def tune(tmp_path, trials):
    return subprocess.run(
        [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
         f"--space={tmp_path / 'space.yaml'}", f"--trials={trials}",
         f"--storage=sqlite:///{tmp_path / 'study.db'}", "--study=tiny", "--startup_trials=1",
         "--seed=0", "--report_steps=2048", "--prune_after=0", *[f"--gin_param={p}" for p in TINY]],
        cwd=ROOT, capture_output=True, text=True, timeout=400)


@pytest.mark.slow
def test_search_with_pruning_then_reopened_adds_trials(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    first = tune(tmp_path, 3)
    assert first.returncode == 0, first.stdout + first.stderr
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'study.db'}")
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 3
    for trial in finished:
        # every trial reported its returns for pruning, at multiples of 2048 env steps
        assert trial.intermediate_values and all(s % 2048 == 0 for s in trial.intermediate_values)
        assert os.path.isdir(trial.user_attrs["root_dir"])
        assert trial.user_attrs["root_dir"] == str(tmp_path / f"trial_{trial.number}")
        assert 1e-4 <= trial.params["alf_async.Learner.learning_rate"] <= 1e-2
    best = study.best_trial
    rate = best.params["alf_async.Learner.learning_rate"]
    assert f"--gin_param='alf_async.Learner.learning_rate={rate}'" in first.stdout
    assert "optuna-dashboard sqlite:///" in first.stdout
    again = tune(tmp_path, 4)
    assert again.returncode == 0, again.stdout + again.stderr
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert len([t for t in study.trials if t.state.is_finished()]) == 4
    assert [t.number for t in study.trials] == [0, 1, 2, 3]  # the same study, one trial more


def test_bad_space_and_missing_target_are_one_line_errors(tmp_path):
    (tmp_path / "space.yaml").write_text("a.b: {low: 2, high: 1}\n")
    result = tune(tmp_path, 1)
    assert result.returncode == 2 and "low must be < high" in result.stderr
    assert "Traceback" not in result.stderr
    steps = subprocess.run(
        [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
         f"--space={tmp_path / 'space.yaml'}", f"--storage=sqlite:///{tmp_path / 's.db'}",
         "--objective=steps_to_target"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert steps.returncode == 2 and "needs --target" in steps.stderr
    beats = subprocess.run(
        [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
         f"--space={tmp_path / 'space.yaml'}", f"--storage=sqlite:///{tmp_path / 's.db'}",
         "--heartbeat_secs=60", "--grace_secs=30"], cwd=ROOT, capture_output=True, text=True,
        timeout=60)
    assert beats.returncode == 2
    assert "--heartbeat_secs must be >= 1 and below --grace_secs, got 60 and 30" in beats.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_workers_share_a_postgresql_study_and_a_dead_workers_trial_is_failed_and_retried(
        tmp_path):
    """Two workers on one study in a real PostgreSQL server on 127.0.0.1; the first is
    killed mid-trial (with its training process, as a lost node would take them)."""
    import postgres_server  # pylint: disable=import-outside-toplevel
    from alf_async.supervision.reaper import descendants  # pylint: disable=import-outside-toplevel

    if postgres_server.binaries() is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "PostgreSQL's initdb and postgres are missing (.ci/run installs them)")
    server = postgres_server.PostgresServer().start()
    (tmp_path / "space.yaml").write_text(SPACE)
    worker = [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
              f"--space={tmp_path / 'space.yaml'}", "--trials=3", "--study=shared",
              f"--out={tmp_path / 'runs'}", "--noprune", "--heartbeat_secs=1", "--grace_secs=3",
              *[f"--gin_param={p}" for p in TINY]]
    first = None
    try:
        url = server.create_database("optuna")
        first = subprocess.Popen([*worker, f"--storage={url}"], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 180
        while not _is_training(first.pid):  # its trial drew its settings and runs them
            assert first.poll() is None and time.time() < deadline, "no trial started"
            time.sleep(0.5)
        for pid in [first.pid, *descendants(first.pid)]:
            os.kill(pid, signal.SIGKILL)
        first.wait(timeout=10)
        second = subprocess.run([*worker, f"--storage={url}"], cwd=ROOT, capture_output=True,
                                text=True, timeout=400)
        assert second.returncode == 0, second.stdout + second.stderr
        trials = _trials(url)
        failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(failed) == 1 and len(complete) == 3
        retry = [t for t in complete if t.system_attrs.get("failed_trial") == failed[0].number]
        assert len(retry) == 1 and retry[0].params == failed[0].params
        assert (f"trial {failed[0].number}: no heartbeat from its worker for 3 s"
                in second.stdout), second.stdout
    finally:
        if first is not None and first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        server.stop()


def _trials(url):
    """The study's trials; [] before a worker made it."""
    try:
        return optuna.load_study(study_name="shared", storage=url).get_trials(deepcopy=False)
    except KeyError:
        return []


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_workers_on_a_cluster_share_a_postgresql_study_one_killed_mid_trial(tmp_path):
    """`--backend=ray --workers=2` on simulated nodes (127.0.0.2-4), 6 trials: one worker is
    SIGKILLed during a trial; it is started again, its trial failed by the heartbeat and
    run again, and the best trial's cell.json re-runs as an experiment."""
    pytest.importorskip("ray")
    import postgres_server  # pylint: disable=import-outside-toplevel
    from alf_async.chaos.ray_cluster import SimulatedCluster  # pylint: disable=import-outside-toplevel

    if postgres_server.binaries() is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "PostgreSQL's initdb and postgres are missing (.ci/run installs them)")
    server = postgres_server.PostgresServer().start()
    previous = os.environ.get("RAY_TMPDIR")
    cluster = SimulatedCluster(actors=2, actor_nodes=2)  # one worker's room on each node
    (tmp_path / "space.yaml").write_text(SPACE)
    proc = None
    try:
        url = server.create_database("optuna")
        sqlite = _tune_on(cluster, tmp_path, f"sqlite:///{tmp_path / 'study.db'}")
        refused = subprocess.run(sqlite, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "SQLite is for one host" in refused.stderr
        proc = subprocess.Popen(_tune_on(cluster, tmp_path, url), cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        victim = _worker_in_a_trial(proc, 240)
        os.kill(victim, signal.SIGKILL)  # its trial's run gets SIGTERM as its parent dies
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output
        trials = _trials(url)
        failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(failed) == 1 and len(complete) == 6, output
        retry = [t for t in complete if t.system_attrs.get("failed_trial") == failed[0].number]
        assert len(retry) == 1 and retry[0].params == failed[0].params
        assert output.count("ended, it died (exit -9); started again (retry 1 of 3)") == 1
        assert f"trial {failed[0].number}: no heartbeat from its worker for 4 s" in output
        assert "study 'shared': 6 complete, 0 pruned, 1 fail" in output
        best = optuna.load_study(study_name="shared", storage=url).best_trial
        again = subprocess.run(
            [sys.executable, "-m", "alf_async.experiment", "run",
             f"--cell={best.user_attrs['root_dir']}/cell.json", "--seeds=1",
             f"--out={tmp_path / 'best'}"], cwd=ROOT, capture_output=True, text=True,
            timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        operative = (tmp_path / "best" / f"trial_{best.number}" / "seed_1" /
                     "operative_config.gin").read_text()
        from alf_async.runs import provenance  # pylint: disable=import-outside-toplevel
        asked = [f"{name}={value}" for name, value in best.params.items()]
        assert provenance.operative_mismatches(operative, asked) == []
        assert provenance.operative_mismatches(operative, ["alf_async.Learner.num_epochs=3"])
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        server.stop()


def _tune_on(cluster, tmp_path, storage):
    return [sys.executable, "-m", "alf_async.tune", "--gin_file=gin_configs/ppo_async.gin",
            f"--space={tmp_path / 'space.yaml'}", "--trials=6", "--study=shared",
            f"--out={tmp_path / 'runs'}", "--noprune", "--heartbeat_secs=1", "--grace_secs=4",
            f"--storage={storage}", *[f"--gin_param={p}" for p in TINY], "--backend=ray",
            f"--address={cluster.address}", "--workers=2", '--worker_resources={"actor": 1}']


def _worker_in_a_trial(proc, timeout):
    """The PID of a tune worker (on a node) with a trial's training process running."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        for pid in _pids_running("alf_async.tune", "--backend=local"):
            if _is_training(pid):
                return pid
        time.sleep(0.5)
    raise AssertionError(f"no worker ran a trial in {timeout} s")


def _is_training(worker):
    """Whether a tune worker runs a trial's training: the trial drew its settings (a worker
    killed between Optuna's ask and its suggestions leaves a failed trial with none)."""
    from alf_async.supervision.reaper import descendants  # pylint: disable=import-outside-toplevel
    return any("alf_async.train" in _cmdline(child) for child in descendants(worker))


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").replace("\0", " ")
    except OSError:
        return ""


def _pids_running(*words):
    return [int(p) for p in os.listdir("/proc") if p.isdigit()
            and all(w in _cmdline(int(p)) for w in words)]
