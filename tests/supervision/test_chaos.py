"""`alf_async.supervision.chaos`: its schedule, its reading of the logs, bad input, and a short
chaos run (slow) whose ledger must be clean."""

import json
import os
import subprocess
import sys
import time

import pytest

from alf_async.supervision import chaos

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_schedule_is_seeded_and_brings_every_kind_once_per_round():
    plan = chaos.schedule(chaos.KINDS, 10.0, 1000.0, seed=3)[:50]
    assert plan == chaos.schedule(chaos.KINDS, 10.0, 1000.0, seed=3)[:50]
    assert plan != chaos.schedule(chaos.KINDS, 10.0, 1000.0, seed=4)[:50]
    outside = sorted(kind for kind in chaos.KINDS if kind in chaos.OUTSIDE)
    assert len(outside) == 5  # env_exception is in the envs
    rounds = [sorted(kind for _, kind in plan[i:i + 5]) for i in range(0, 50, 5)]
    assert all(r == outside for r in rounds)
    times = [t for t, _ in plan]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert 5.0 < times[-1] / len(times) < 20.0  # mean gap 10 s
    assert all(t <= 60 for t, _ in chaos.schedule(chaos.KINDS, 10.0, 60.0, seed=3))
    assert sorted(k for _, k in chaos.schedule(chaos.KINDS, 10.0, 1000.0, 3, rounds=2)) == \
        sorted(outside * 2)


@pytest.mark.parametrize("flag, line", [
    ("--faults=env_exception,meteor", "unknown fault kind 'meteor'"),
    ("--faults=node_loss", "unknown fault kind 'node_loss' (needs --backend=ray)"),
    ("--env_fault_p=1.5", "--env_fault_p must be in [0, 1], got 1.5"),
    ("--actors=0", "--actors must be >= 1, got 0"),
    ("--mean_interval_env_steps=-1", "--mean_interval_env_steps must be >= 0, got -1"),
    ("--mean_interval_env_steps=5000", "--mean_interval_env_steps needs --rounds >= 1")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flag, line):
    result = subprocess.run([sys.executable, "-m", "alf_async.supervision.chaos", f"--root_dir={tmp_path}",
                             flag], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and line in errors[0]
    assert not os.path.exists(tmp_path / "launch.log")  # nothing was started


LOG = """\
I1126 10:00:00.000000 1 launch.py:1] launch: a learner on 127.0.0.1:1 and 2 actor process(es)
I1126 10:00:10.000000 1 training_loop.py:1] iteration 10 | env steps 20480 | 1 frames/s
I1126 10:00:15.000000 1 training_loop.py:1] iteration 25 | env steps 51200 | 1 frames/s
W1126 10:00:16.000000 1 supervisor.py:1] launch: learner exited with signal SIGKILL; restart 1 in 1.0 s
W1126 10:00:16.500000 1 supervisor.py:1] launch: actor 1 exited with signal SIGKILL; restart 1 in 1.0 s
I1126 10:00:27.000000 1 checkpoints.py:1] Resumed from /r/checkpoints/ckpt-20 at iteration 20
I1126 10:00:30.000000 1 training_loop.py:1] iteration 21 | env steps 43008 | 1 frames/s
I1126 10:00:31.000000 1 training_loop.py:1] Average return reached 475.0 after 20.1 s and 45056 env steps
"""


def test_progress_in_env_steps_is_the_most_any_learner_logged():
    """A schedule over env steps gives every run all its rounds however fast it goes;
    a learner resumed from an older checkpoint logs fewer steps again: no going back."""
    assert chaos.progress_env_steps(LOG) == 51200  # not the resumed learner's 43008
    assert chaos.progress_env_steps(LOG + "iteration 30 | env steps 61440 | x\n") == 61440
    assert chaos.progress_env_steps("") == 0


class _Proc:
    """A launch that runs for `polls` polls, then has exited."""

    def __init__(self, polls):
        self.polls = polls

    def poll(self):
        self.polls -= 1
        return None if self.polls > 0 else 0


class _Injector:
    last_target = ""

    def __init__(self, fires):
        self.fires, self.tried = fires, []

    def inject(self, kind):
        self.tried.append(kind)
        return self.fires(kind)

    def clear_blockers(self, force=False):
        pass


def test_faults_the_run_ended_before_are_left_in_the_plan_as_unfired(monkeypatch):
    """Of 3 rounds of 2 kinds only what came due while the launch ran fires; the rest
    stays in the plan (the ledger's `unfired`), and a fault with no target yet waits."""
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    plan = [(1.0, "actor_kill"), (2.0, "learner_kill"), (3.0, "actor_kill"),
            (50.0, "learner_kill"), (60.0, "actor_kill"), (70.0, "learner_kill")]
    clock = iter(range(100))
    injector = _Injector(lambda kind: kind != "learner_kill" or len(injector.tried) > 2)
    injected = chaos._inject_until_done(  # pylint: disable=protected-access
        _Proc(polls=8), injector, plan, deadline=float("inf"),
        progress=lambda: float(next(clock)))
    assert injected == {"actor_kill": 2, "learner_kill": 1}
    assert injector.tried[:3] == ["actor_kill", "learner_kill", "learner_kill"]
    assert chaos._count_kinds(plan) == {"learner_kill": 2, "actor_kill": 1}  # pylint: disable=protected-access


def test_the_ledger_reads_restarts_losses_and_the_target_from_the_log():
    assert chaos.restarts_by_child(LOG) == {"learner": 1, "actor 1": 1}
    lost = chaos.lost_to_learner_restarts(LOG)
    assert lost == dict(env_steps_lost=5 * 2048, seconds_lost=15.0)  # iterations 21-25 again
    started = chaos._seconds("I1126 10:00:00.000000")  # pylint: disable=protected-access
    assert chaos.reached(LOG, 475.0, started) == dict(env_steps=45056, wall_seconds=31.0)
    assert chaos.reached(LOG, 500.0, started) is None


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_short_chaos_run_reaches_475_with_a_clean_ledger(tmp_path):
    ledger_path = tmp_path / "ledger.json"
    result = subprocess.run(
        [sys.executable, "-m", "alf_async.supervision.chaos", f"--root_dir={tmp_path / 'run'}", "--seed=11",
         # over env steps: every kind comes however fast the run is (5 kinds, mean
         # 25k apart, well inside the 400k steps)
         "--mean_interval_env_steps=25000", "--rounds=1", "--timeout_secs=330",
         # past the target, so that every kind comes at least once
         "--gin_param=train.stop_at_return=None", "--gin_param=train.num_env_steps=400000",
         f"--ledger={ledger_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    ledger = json.loads(ledger_path.read_text())
    assert result.returncode == 0, (ledger, result.stderr[-3000:])
    assert ledger["reached"] is not None and ledger["exit_status"] == 0
    assert set(ledger["faults"]) == set(chaos.KINDS), ledger["faults"]
    assert all(count >= 1 for count in ledger["faults"].values()), ledger["faults"]
    assert ledger["restarts"].get("learner", 0) >= 2  # a kill and a SIGTERM
    for zero in ("processes_left", "unreadable_checkpoints", "duplicated_unrolls", "hangs"):
        assert ledger[zero] == 0, (zero, ledger)


def test_a_waiting_spare_is_no_fault_target_until_it_is_promoted(tmp_path):
    """A spare's command line names the learner's module too: the injector must
    not take it for the learner (killing it would inject nothing)."""
    from alf_async.supervision.spare import PROMOTE, SPARE_NAME
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=tests)
    ledger = tmp_path / "ledger"
    spare = subprocess.Popen([sys.executable, "-m", "alf_async.supervision.spare", "fake_child",
                              str(ledger), "serve", "alf_async.train"],
                             stdin=subprocess.PIPE, env=env)
    tree = chaos.LaunchTree(os.getpid())
    try:
        deadline = time.monotonic() + 30
        while open(f"/proc/{spare.pid}/comm").read().strip() != SPARE_NAME:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert tree.learner() is None
        spare.stdin.write(PROMOTE)
        spare.stdin.close()
        while tree.learner() != spare.pid:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        spare.kill()
        spare.wait(timeout=10)
