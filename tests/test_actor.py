"""`python -m alf_async.actor` processes feeding a learner on 127.0.0.1.

Every process is started here, waited for with a bound and killed by its PID
in a `finally`.
"""

import os
import re
import signal
import subprocess
import sys
import time

import gin
import pytest

pytest.importorskip("reverb")

from alf_async import config  # noqa: E402

from alf_async.training import assembly
from alf_async.training.settings import RunSettings
import alf_async.training.run  # noqa: E402,F401  registers gin's `train`, which the gin files bind
from alf_async.errors import LearnerStarvedError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIN_FILE = "gin_configs/ppo_remote.gin"
SMALL = ["create_environment.num_parallel_environments=8",
         "LearnFeed.learner_queue_timeout=20.0",
         "ReverbService.actor_timeout_secs=3.0",
         "ActorProcess.server_timeout_secs=3.0"]


class _Processes:
    """Actor (or learner) processes of one test; `kill_all()` stops what is left."""

    def __init__(self, tmp_path):
        self._tmp_path = tmp_path
        self.procs = {}

    def start(self, name, args, nice=0):
        log = open(self._tmp_path / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            preexec_fn=(lambda: os.nice(nice)) if nice else None)
        log.close()
        return self.procs[name]

    def actor(self, task, port, params=SMALL, nice=0):
        return self.start(f"actor{task}", [
            "alf_async.actor", f"--server=127.0.0.1:{port}", f"--task={task}",
            f"--gin_file={GIN_FILE}", *[f"--gin_param={p}" for p in params]], nice)

    def log(self, name):
        return (self._tmp_path / f"{name}.log").read_text()

    def kill_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def processes(tmp_path):
    procs = _Processes(tmp_path)
    yield procs
    procs.kill_all()


@pytest.fixture(autouse=True)
def _one_run_secret(monkeypatch):
    """The learner in this process and the actor processes share the run's secret."""
    monkeypatch.setenv("ALF_ASYNC_RUN_SECRET", "17")


@pytest.fixture
def learner():
    """The learner's driver in this process, serving a free port (it does not train)."""
    config.parse_config([os.path.join(ROOT, GIN_FILE)], SMALL)
    _, _, driver, _ = assembly.build(assembly.run_settings(RunSettings(serve_port=0)))
    driver.start()
    yield driver
    driver.stop()
    gin.clear_config()


def _wait_for_a_first_unroll(driver, tasks, timeout=120.0):
    """Waits until one of `tasks`, started together, delivered an unroll: a process
    importing TensorFlow on a loaded machine can take longer than
    `learner_queue_timeout`. (Not every task: until the learner takes batches, the
    service reads only as far as the learn queue holds.)"""
    deadline = time.time() + timeout
    while not any(driver.remote.registry.unrolls(task) > 0 for task in tasks):
        assert time.time() < deadline, f"no unroll of tasks {tasks} in {timeout} s"
        time.sleep(0.2)


def _wait_for_tasks(driver, tasks, timeout=120.0, min_batches=1):
    """Takes learn batches until unrolls of every task in `tasks` came; returns their tasks."""
    seen, deadline = [], time.time() + timeout
    while not set(tasks) <= set(seen) or len(seen) < min_batches * driver.learn_queue_cap:
        assert time.time() < deadline, f"tasks seen {sorted(set(seen))}, waited for {tasks}"
        batch = driver.get_training_exps()
        seen += [int(e) // driver.num_envs for e in batch.env_ids.numpy()]
    return seen


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_actors_die_join_and_leave_while_the_learner_goes_on(learner, processes):
    port = learner.remote.port
    actors = [processes.actor(task, port) for task in (0, 1)]
    _wait_for_a_first_unroll(learner, [0, 1])
    _wait_for_tasks(learner, [0, 1])
    assert learner.remote.actors_alive() == 2

    os.kill(actors[0].pid, signal.SIGKILL)
    after_kill, deadline = [], time.time() + 6.0  # drain, then actor_timeout_secs passes
    while time.time() < deadline:
        after_kill += _wait_for_tasks(learner, [])
    assert learner.remote.actors_alive() == 1
    assert set(after_kill[-4:]) == {1}

    newcomer = processes.actor(2, port)
    _wait_for_tasks(learner, [2])
    assert learner.remote.actors_alive() == 2

    os.kill(actors[1].pid, signal.SIGTERM)  # a clean stop after the current unroll
    assert actors[1].wait(timeout=30) == 0
    assert "stopped by a signal" in processes.log("actor1")

    learner.stop()  # the learner goes away: the last actor ends by itself
    assert newcomer.wait(timeout=3.0 + 30) == 3
    assert "has not answered for 3 s" in processes.log("actor2")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_learner_whose_actors_all_died_starves_with_their_last_sighting(learner, processes):
    actor = processes.actor(0, learner.remote.port)
    _wait_for_a_first_unroll(learner, [0])
    _wait_for_tasks(learner, [0])
    os.kill(actor.pid, signal.SIGKILL)
    start = time.time()
    with pytest.raises(LearnerStarvedError, match=r"actor task 0: \d+ unrolls, last [\d.]+ s ago"):
        for _ in range(100):
            learner.get_training_exps()
    assert time.time() - start < 20.0 + 10


@pytest.mark.timeout(120)
def test_help_lists_the_actor_flags():
    result = subprocess.run([sys.executable, "-m", "alf_async.actor", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=100)
    for flag in ("--server", "--task", "--gin_file", "--gin_param"):
        assert re.search(rf"^  {flag}: \S", result.stdout + result.stderr, re.M), flag


@pytest.mark.timeout(120)
def test_bad_actor_settings_exit_2_with_one_line(processes):
    proc = processes.start("bad_task", ["alf_async.actor", "--server=127.0.0.1:1", "--task=-1",
                                        f"--gin_file={GIN_FILE}"])
    assert proc.wait(timeout=90) == 2
    assert "--task must be an integer >= 0, got -1" in processes.log("bad_task")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_while_waiting_for_the_learner_exits_0_at_once(processes):
    proc = processes.start("waiting", [
        "alf_async.actor", "--server=127.0.0.1:1", "--task=0", f"--gin_file={GIN_FILE}",
        *[f"--gin_param={p}" for p in SMALL]])
    deadline = time.time() + 90
    while "waiting up to" not in processes.log("waiting") and time.time() < deadline:
        assert proc.poll() is None, processes.log("waiting")[-2000:]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=15) == 0, processes.log("waiting")[-2000:]
    assert "Actor task 0 stopped by a signal before it started" in processes.log("waiting")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_learner_and_two_actor_processes_train_cartpole_to_475(tmp_path, processes):
    root = tmp_path / "run"
    learner = processes.start("learner", [
        "alf_async.train", f"--gin_file={GIN_FILE}", f"--root_dir={root}", "--serve_port=0",
        "--gin_param=train.stop_at_return=475.0", "--gin_param=train.num_env_steps=3000000"])
    deadline, port = time.time() + 120, None
    while port is None and time.time() < deadline and learner.poll() is None:
        found = re.search(r"listening on port (\d+)", processes.log("learner"))
        port = found and int(found.group(1))
        time.sleep(0.5)
    assert port, processes.log("learner")[-2000:]
    params = ["ActorProcess.server_timeout_secs=5.0"]
    actors = [processes.actor(task, port, params) for task in (0, 1)]
    assert learner.wait(timeout=700) == 0, processes.log("learner")[-3000:]
    log = processes.log("learner")
    assert "Average return reached 475.0" in log
    result = re.search(r"Training done: .*'average_return': ([\d.]+)", log)
    assert float(result.group(1)) >= 475.0
    for task, actor in enumerate(actors):  # the learner is gone: 3, after 5 s of silence
        assert actor.wait(timeout=60) == 3, processes.log(f"actor{task}")[-2000:]


def _learner_process(processes, root):
    """A learner process serving a free port; returns (process, port)."""
    learner = processes.start("learner", [
        "alf_async.train", f"--gin_file={GIN_FILE}", f"--root_dir={root}", "--serve_port=0",
        "--gin_param=train.num_env_steps=100000000",
        "--gin_param=create_environment.num_parallel_environments=8"])
    deadline, port = time.time() + 120, None
    while port is None and time.time() < deadline and learner.poll() is None:
        found = re.search(r"listening on port (\d+)", processes.log("learner"))
        port = found and int(found.group(1))
        time.sleep(0.5)
    assert port, processes.log("learner")[-2000:]
    return learner, port


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_starved_actor_ends_when_its_learner_is_killed(tmp_path, processes):
    """The actor at the lowest priority beside a busy loop on each core; the learner
    SIGKILLed while the actor sends: it ends within its timeout, with status 3."""
    learner, port = _learner_process(processes, tmp_path / "run")
    actor = processes.actor(0, port, ["create_environment.num_parallel_environments=8",
                                      "ActorProcess.server_timeout_secs=5.0"], nice=19)
    deadline = time.time() + 240
    while "| env steps" not in processes.log("learner"):
        assert time.time() < deadline and actor.poll() is None, processes.log("actor0")[-2000:]
        time.sleep(0.5)
    for core in range(os.cpu_count() or 2):
        processes.start(f"busy{core}", ["timeit", "-n", "1000000000", "pass"])
    time.sleep(2.0)
    os.kill(learner.pid, signal.SIGKILL)
    killed = time.time()
    assert actor.wait(timeout=5.0 + 10.0 + 60) == 3, processes.log("actor0")[-2000:]
    assert time.time() - killed < 5.0 + 10.0 + 60
    errors = [line for line in processes.log("actor0").splitlines()
              if line.startswith("E") or "exiting" in line]
    assert len(errors) == 1 and ("has not answered for 5 s" in errors[0]
                                 or "no answer for" in errors[0]), errors


def test_an_actor_without_the_runs_secret_is_one_line_and_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ALF_ASYNC_RUN_SECRET"}
    result = subprocess.run([sys.executable, "-m", "alf_async.actor", "--server=127.0.0.1:1",
                             "--task=0", f"--gin_file={GIN_FILE}"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run secret" in lines[0] and "ALF_ASYNC_RUN_SECRET" in lines[0]
