"""`alf_async.chaos.faults`: the schedule, the injection loop, the run's processes,
the injector's targets."""

import os
import random
import signal
import subprocess
import sys
import time

from alf_async import events
from alf_async.chaos import faults
from records_fakes import write_records


def test_the_schedule_is_seeded_and_brings_every_kind_once_per_round():
    plan = faults.schedule(faults.KINDS, 10.0, 1000.0, seed=3)[:50]
    assert plan == faults.schedule(faults.KINDS, 10.0, 1000.0, seed=3)[:50]
    assert plan != faults.schedule(faults.KINDS, 10.0, 1000.0, seed=4)[:50]
    outside = sorted(kind for kind in faults.KINDS if kind in faults.OUTSIDE)
    assert len(outside) == 5  # env_exception is in the envs
    rounds = [sorted(kind for _, kind in plan[i:i + 5]) for i in range(0, 50, 5)]
    assert all(r == outside for r in rounds)
    times = [t for t, _ in plan]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert 5.0 < times[-1] / len(times) < 20.0  # mean gap 10 s
    assert all(t <= 60 for t, _ in faults.schedule(faults.KINDS, 10.0, 60.0, seed=3))
    assert sorted(k for _, k in faults.schedule(faults.KINDS, 10.0, 1000.0, 3, rounds=2)) == \
        sorted(outside * 2)


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
    injected = faults.inject_until_done(
        _Proc(polls=8), injector, plan, deadline=float("inf"),
        progress=lambda: float(next(clock)))
    assert injected == {"actor_kill": 2, "learner_kill": 1}
    assert injector.tried[:3] == ["actor_kill", "learner_kill", "learner_kill"]
    assert faults.count_kinds(plan) == {"learner_kill": 2, "actor_kill": 1}


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
    tree = faults.LaunchTree(os.getpid())
    injector = faults.Injector(tree, str(tmp_path), random.Random(0),
                              events.EventReader(str(tmp_path)), cluster=nodes)
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
    tree = faults.LaunchTree(os.getpid())
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
    injector = faults.Injector(faults.LaunchTree(os.getpid()), str(tmp_path), random.Random(0),
                              events.EventReader(str(tmp_path)))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-10.index").write_text("")
    assert not injector.inject("checkpoint_write")  # no run_settings.json yet
    write_records(str(tmp_path), checkpoint_interval=5)
    try:
        assert injector.inject("checkpoint_write")
        blocked = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
        assert blocked == ["ckpt-15.index", "ckpt-20.index"]
    finally:
        injector.clear_blockers(force=True)
