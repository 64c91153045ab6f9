import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import gin
import numpy as np
import pytest

from alf_async.training import assembly
from alf_async.training.settings import RunSettings

from alf_async.training import run as run_lib
from alf_async.environments import GymnasiumBatchedEnv
from alf_async.errors import ThreadError
from fakes import timed_stop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()  # later modules expect gin's defaults


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead too
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("env_name", ["Pendulum-v1", "CartPole-v1"])
def test_worker_processes_step_exactly_like_the_env_thread(env_name):
    here = GymnasiumBatchedEnv(env_name, 4, seed=3)
    there = GymnasiumBatchedEnv(env_name, 4, seed=3, num_workers=2)
    assert len(there.worker_pids) == 2 and not here.worker_pids
    rng = np.random.default_rng(0)
    sample = lambda: (rng.uniform(-3, 3, (4, 1)).astype(np.float32) if env_name == "Pendulum-v1"
                      else rng.integers(0, 2, 4))
    steps = [(here.reset(), there.reset())]
    for _ in range(230):  # Pendulum's time limit (200) gives LAST then FIRST
        action = sample()
        steps.append((here.step(action), there.step(action)))
    here.close()
    there.close()
    for a, b in steps:
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    step_types = np.stack([a.step_type for a, _ in steps])
    assert (step_types == 2).any() and (step_types[1:] == 0).any()  # episodes ended, restarted
    assert not any(_alive(pid) for pid in there.worker_pids)


def test_a_killed_worker_is_an_error_naming_it_and_close_reaps_the_rest():
    env = GymnasiumBatchedEnv("CartPole-v1", 4, seed=0, num_workers=2)
    env.reset()
    pids = env.worker_pids
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(RuntimeError, match=rf"env worker 1 \(pid {pids[1]}\) exited with code -9"):
        for _ in range(10):
            env.step(np.zeros(4, np.int64))
    env.close()
    assert not any(_alive(pid) for pid in pids)


def test_closing_an_env_whose_worker_died_unseen_reaps_the_rest_without_an_error():
    env = GymnasiumBatchedEnv("CartPole-v1", 4, seed=0, num_workers=2)
    env.reset()
    pids = env.worker_pids
    os.kill(pids[0], signal.SIGKILL)  # dies between steps: no call saw it
    deadline = time.monotonic() + 10
    while _alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.02)
    env.close()
    assert not any(_alive(pid) for pid in pids)


def test_num_workers_must_divide_the_sub_envs():
    with pytest.raises(ValueError, match="create_environment.num_workers=3"):
        GymnasiumBatchedEnv("CartPole-v1", 4, num_workers=3)


def _started_driver(restart: bool):
    gin.clear_config()
    gin.parse_config_files_and_bindings(["gin_configs/ppo_async.gin"], [
        "create_environment.num_workers = 2", "create_environment.num_parallel_environments = 8",
        f"LocalCollection.restart_failed_envs = {restart}"])
    _, _, driver, _ = assembly.build(assembly.run_settings(RunSettings(seed=1)))
    driver.start()
    return driver


@pytest.mark.parametrize("restart", [False, True])
def test_driver_with_a_killed_worker_stops_naming_the_env_thread_or_restarts_it(
        restart, monkeypatch):
    monkeypatch.chdir(ROOT)
    driver = _started_driver(restart)
    pids = [pid for env in driver.collection.envs for pid in env.worker_pids]
    assert len(pids) == 4  # 2 env threads x 2 workers
    try:
        driver.get_training_exps()
        os.kill(pids[0], signal.SIGKILL)
        if restart:
            for _ in range(5):
                driver.get_training_exps()
            assert driver.summaries()["faults/env_restarts"] == 1
        else:
            with pytest.raises(ThreadError, match=r"EnvThread0 failed: .*exited with code -9"):
                for _ in range(50):
                    driver.get_training_exps()
    finally:
        timed_stop(driver, bound=5.0)  # the error was raised once, by get_training_exps()
    deadline = time.time() + 5
    while multiprocessing.active_children() and time.time() < deadline:
        time.sleep(0.05)
    assert not multiprocessing.active_children()
    assert not any(_alive(pid) for pid in pids)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_process_group_stops_training_cleanly(tmp_path, signum):
    # What Ctrl-C, `timeout` and job schedulers do: every process of the run
    # gets the signal, the env workers included.
    root = str(tmp_path / "run")
    process = subprocess.Popen(
        [sys.executable, "-m", "alf_async.train", "--gin_file=gin_configs/ppo_async.gin",
         f"--root_dir={root}", "--gin_param=create_environment.num_workers=2",
         "--gin_param=create_environment.env_name='Pendulum-v1'",
         "--gin_param=train.log_interval_secs=0.5"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in process.stderr:  # training is under way once progress is logged
            if "frames/s" in line:
                break
        os.killpg(process.pid, signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if root.encode() in f.read() and _alive(int(pid)):
                    survivors.append(int(pid))
        except OSError:
            pass
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors
    assert process.returncode == 128 + signum, stderr[-2000:]
    assert f"Interrupted by {signal.Signals(signum).name} at iteration" in stderr
    assert "checkpoint saved" in stderr and "failed" not in stderr
    assert os.path.isfile(os.path.join(root, "policy", "saved_model.pb"))


def test_a_dropped_worker_env_takes_its_workers_with_it():
    env = GymnasiumBatchedEnv("CartPole-v1", 4, seed=0, num_workers=2)
    env.reset()
    pids = env.worker_pids
    for pid in pids:  # ignored: only the owner ends its workers
        os.kill(pid, signal.SIGTERM)
    env.step(np.zeros(4, np.int64))
    assert all(_alive(pid) for pid in pids)
    del env  # never closed: the workers are killed, not waited on forever
    gc.collect()
    assert not any(_alive(pid) for pid in pids)


class _DiesInWorkerOne:
    """A CartPole whose making kills worker 1 (as a SIGKILL of a worker that is
    making its env would): the worker exits before it answers."""

    def __new__(cls, **kwargs):
        import gymnasium  # pylint: disable=import-outside-toplevel
        if multiprocessing.current_process().name.endswith("-1"):
            os._exit(9)
        return gymnasium.make("CartPole-v1", **kwargs)


def test_workers_whose_env_fails_while_it_is_made_are_not_left_behind():
    """They ignore SIGTERM: left to multiprocessing's exit, they hung their actor
    process after its error (until a SIGKILL from outside)."""
    import gymnasium  # pylint: disable=import-outside-toplevel
    gymnasium.register("DiesInWorkerOne-v0", entry_point=_DiesInWorkerOne)
    before = {p.pid for p in multiprocessing.active_children()}
    try:
        with pytest.raises((EOFError, OSError)):
            GymnasiumBatchedEnv("DiesInWorkerOne-v0", 4, seed=0, num_workers=2)
        left = [p for p in multiprocessing.active_children() if p.pid not in before]
        assert not left, [p.pid for p in left]
    finally:
        del gymnasium.registry["DiesInWorkerOne-v0"]
        for process in multiprocessing.active_children():
            if process.pid not in before:
                process.kill()


OWNER = """
import sys, time
from alf_async.environments import GymnasiumBatchedEnv
env = GymnasiumBatchedEnv("CartPole-v1", 4, seed=0, num_workers=2)
env.reset()
print(*env.worker_pids, flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_workers_die_with_an_owner_killed_by_sigkill():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        pids = [int(pid) for pid in owner.stdout.readline().split()]  # bounded by the
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)   # test's timeout
        owner.kill()
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in pids), "env workers outlived their owner"
    finally:
        owner.kill()
        owner.wait(timeout=10)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_evaluation_plays_in_process_whatever_num_workers_says(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    gin.clear_config()
    gin.parse_config_files_and_bindings(["gin_configs/ppo_async.gin"], [
        "create_environment.num_workers = 2", "create_environment.num_parallel_environments = 8"])
    # 3 evaluation episodes would not split over 2 workers: evaluation must not use them.
    result = run_lib.train(str(tmp_path), RunSettings(num_iterations=2, num_env_steps=None, eval_interval=1,
                           num_eval_episodes=3, seed=1))
    assert result["iteration"] == 2
    assert not multiprocessing.active_children()
