"""`alf_async.supervision.chaos`: its schedule, its reading of the logs, bad input, and a short
chaos run (slow) whose ledger must be clean."""

import json
import os
import random
import signal
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
    ("--actor_nodes=0", "--actor_nodes must be >= 1, got 0"),
    ("--mean_interval_env_steps=-1", "--mean_interval_env_steps must be >= 0, got -1"),
    ("--mean_interval_env_steps=5000", "--mean_interval_env_steps needs --rounds >= 1")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flag, line):
    result = subprocess.run([sys.executable, "-m", "alf_async.supervision.chaos", f"--root_dir={tmp_path}",
                             flag], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and line in errors[0]
    assert not os.path.exists(tmp_path / "launch.log")  # nothing was started


T0 = 1_790_000_000.0  # the run's start (a time.time())


def _event(at, process, event, **fields):
    return dict(time=T0 + at, process=process, pid=1, event=event, **fields)


EVENTS = [  # a run's events: progress, a killed learner and actor, the resume, the target
    _event(0.0, "launch", "started", command="launch"),
    _event(10.0, "learner", "progress", iteration=10, env_steps=20480, average_return=20.0),
    _event(15.0, "learner", "progress", iteration=25, env_steps=51200, average_return=80.0),
    _event(16.0, "launch", "restarted", child="learner", reason="signal SIGKILL", restart=1,
           delay_secs=0.0),
    _event(16.5, "launch", "restarted", child="actor 1", reason="signal SIGKILL", restart=1,
           delay_secs=0.0),
    _event(27.0, "learner", "resumed", iteration=20, env_steps=40960),
    _event(30.0, "learner", "progress", iteration=21, env_steps=43008, average_return=70.0),
    _event(30.5, "actor 0", "env_exception_survived", env="EnvThread1",
           error="InjectedEnvFault('step 12')"),
    _event(30.6, "actor 1", "env_exception_survived", env="EnvThread0",
           error="RuntimeError('boom')"),
    _event(31.0, "learner", "reached_target", average_return=476.0, env_steps=45056,
           seconds=20.1),
]


def test_progress_in_env_steps_is_the_most_any_learner_logged():
    """A schedule over env steps gives every run all its rounds however fast it goes;
    a learner resumed from an older checkpoint logs fewer steps again: no going back."""
    assert chaos.progress_env_steps(EVENTS) == 51200  # not the resumed learner's 43008
    later = _event(40.0, "learner", "progress", iteration=30, env_steps=61440, average_return=0)
    assert chaos.progress_env_steps(EVENTS + [later]) == 61440
    assert chaos.progress_env_steps([]) == 0


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


def test_the_ledger_reads_restarts_losses_and_the_target_from_the_runs_events():
    assert chaos.restarts_by_child(EVENTS) == {"learner": 1, "actor 1": 1}
    lost = chaos.lost_to_learner_restarts(EVENTS)
    assert lost == dict(env_steps_lost=5 * 2048, seconds_lost=15.0)  # iterations 21-25 again
    assert chaos.reached(EVENTS, 475.0, T0) == dict(env_steps=45056, wall_seconds=31.0)
    assert chaos.reached(EVENTS, 500.0, T0) is None
    assert chaos.env_restarts(EVENTS) == 2 and chaos.env_restarts(EVENTS, "InjectedEnvFault") == 1


def test_the_run_events_are_read_again_only_where_a_file_grew(tmp_path):
    """What the injector polls every 0.1 s: new events show, a torn line is skipped."""
    from alf_async import events  # pylint: disable=import-outside-toplevel
    learner = events.EventLog(str(tmp_path), "learner", pid=7)
    read = chaos.RunEvents(str(tmp_path))
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


class _FakeNodes:
    """Two actor 'nodes' for the injector: each a process (its 'raylet') whose children
    are named as actor processes."""

    def __init__(self, actors_per_node):
        code = ("import subprocess, sys, time; "  # the actors' argv ends 'alf_async.actor'
                "[subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', "
                "sys.argv[2] + '.actor']) for _ in range(int(sys.argv[1]))]; time.sleep(60)")
        self.raylets = [subprocess.Popen([sys.executable, "-c", code, str(count), "alf_async"],
                                         start_new_session=True)
                        for count in actors_per_node]
        self.replaced = []

    def actor_node_pids(self):
        return [raylet.pid for raylet in self.raylets]

    def replace_actor_node(self, index):
        self.replaced.append(index)
        return f"old{index}", f"new{index}"

    def stop(self):
        for raylet in self.raylets:
            os.killpg(raylet.pid, signal.SIGKILL)
            raylet.wait(timeout=10)


def test_node_loss_takes_the_actor_node_that_holds_the_most_actors(tmp_path):
    nodes = _FakeNodes([1, 2])
    tree = chaos.LaunchTree(os.getpid())
    injector = chaos.Injector(tree, str(tmp_path), random.Random(0),
                              chaos.RunEvents(str(tmp_path)), cluster=nodes)
    try:
        deadline = time.monotonic() + 30
        while len(tree.actors()) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert [len(tree.actors(below=pid)) for pid in nodes.actor_node_pids()] == [1, 2]
        assert injector.inject("node_loss")
        assert nodes.replaced == [1]
        assert injector.last_target == "node old1 with 2 actor(s) (now new1)"
    finally:
        nodes.stop()


def test_a_waiting_spare_is_no_fault_target_until_it_is_promoted(tmp_path):
    """A spare's command line names the learner's module too: the injector must
    not take it for the learner (killing it would inject nothing)."""
    from alf_async.supervision.spare import PROMOTE, READY_NAME
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=tests)
    ledger = tmp_path / "ledger"
    spare = subprocess.Popen([sys.executable, "-m", "alf_async.supervision.spare", "fake_child",
                              str(ledger), "serve", "alf_async.train"],
                             stdin=subprocess.PIPE, env=env)
    tree = chaos.LaunchTree(os.getpid())
    try:
        deadline = time.monotonic() + 30
        while open(f"/proc/{spare.pid}/comm").read().strip() != READY_NAME:
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


def test_a_checkpoint_write_fault_blocks_the_next_two_at_the_runs_recorded_interval(tmp_path):
    """The interval comes from the run's run_settings.json (no gin text is parsed); a run
    that has not started yet gives the fault no target."""
    injector = chaos.Injector(chaos.LaunchTree(os.getpid()), str(tmp_path), random.Random(0),
                              chaos.RunEvents(str(tmp_path)))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-10.index").write_text("")
    assert not injector.inject("checkpoint_write")  # no run_settings.json yet
    (tmp_path / "run_settings.json").write_text(json.dumps({"run": {"checkpoint_interval": 5}}))
    try:
        assert injector.inject("checkpoint_write")
        blocked = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
        assert blocked == ["ckpt-15.index", "ckpt-20.index"]
    finally:
        injector.clear_blockers(force=True)
