"""The launch on a Ray cluster (`--backend=ray`), on simulated nodes of one host.

One Ray per module: a `SimulatedCluster` (a head node, a node with the learner's
resource, a node with the actors', each at its own 127.0.0.N) that the tests here
that need a cluster join. Its processes must bind and
reach 127.0.0.1 only. Every wait is bounded; every command process is killed by
its PID in a `finally`, and the cluster is shut down (never `ray stop`).
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from alf_async import events
from alf_async.supervision.ray_backend import LearnerAddresses
from alf_async.chaos.ray_cluster import SimulatedCluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIN = "gin_configs/ppo_chaos.gin"
_ANY4 = "00000000"
_LOOPBACK6 = "00000000000000000000000001000000"  # ::1


class SocketWatch(threading.Thread):
    """Looks at the sockets of the Ray processes below this one every 0.2 s, for the
    module's whole life, and keeps those with an address other than loopback."""

    def __init__(self):
        super().__init__(daemon=True, name="SocketWatch")
        self.stopped, self.looks, self.seen, self.outside = threading.Event(), 0, set(), []

    def run(self):
        while not self.stopped.wait(0.2):
            self.looks += 1
            table, sockets = _table(), _sockets()
            for pid in _below(os.getpid(), table):
                if "alf_async." in table[pid][2]:
                    continue  # a command: the learner's Reverb server listens on all interfaces
                for inode in _socket_inodes(pid):
                    if inode in sockets:
                        self.seen.add(inode)
                        local, remote = sockets[inode]
                        if local == _ANY4 or not (_loopback(local) and _loopback(remote)):
                            self.outside.append((table[pid][2][:80], local, remote))


@pytest.fixture(scope="module")
def cluster():
    previous = os.environ.get("RAY_TMPDIR")
    cluster = SimulatedCluster(actors=2)  # in a new /tmp/alf_ray_cluster_* (short socket paths)
    cluster.watch = SocketWatch()
    cluster.watch.start()
    yield cluster
    cluster.watch.stopped.set()
    cluster.watch.join(timeout=10)
    cluster.shutdown()
    if previous is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = previous


def _table():
    """{pid: (ppid, session, cmdline)} of the live, non-zombie processes."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode(errors="replace").replace("\0", " ")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[3]), argv)
    return table


def _below(pid, table):
    below, grew = {pid}, True
    while grew:
        more = {p for p, (ppid, _, _) in table.items() if ppid in below} - below
        below, grew = below | more, bool(more)
    return below - {pid}


def _commands(table, root):
    """{pid: cmdline} of the run's learner and actor processes (and their forks)."""
    return {pid: cmd for pid, (_, _, cmd) in table.items()
            if f"--root_dir={root}" in cmd and ("alf_async.train" in cmd or
                                                "alf_async.actor" in cmd)}


def _launch(tmp_path, cluster, *flags):
    out = open(tmp_path / "launch.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "alf_async.launch", *cluster.launch_flags(),
                             *flags], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return proc


def _wait_for(path, pattern, proc, timeout, start=0):
    """The first match of `pattern` in the log past offset `start`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, open(path).read()[start:])
        if found:
            return found
        assert proc.poll() is None, open(path).read()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {timeout} s: {open(path).read()[-3000:]}")


def _stop(proc, root):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    table = _table()
    commands, sessions = _commands(table, root), _sessions(root, table)
    for pid, (_, sid, _) in table.items():
        if pid in commands or sid in sessions:
            os.kill(pid, signal.SIGKILL)


def _sessions(root, table):
    commands = _commands(table, root)
    return {sid for pid, (_, sid, _) in table.items() if pid in commands}


def _progress(log):
    return [int(n) for n in re.findall(r"iteration \d+ \| env steps (\d+)", log)]


def _endless_run(tmp_path, cluster):
    """A launch on the cluster with 2 actors that trains until stopped: (root, log, proc)."""
    root, log = tmp_path / "run", tmp_path / "launch.log"
    proc = _launch(tmp_path, cluster, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--gin_param=train.stop_at_return=None",
                   "--gin_param=train.num_env_steps=100000000")
    return root, log, proc


def _wait_past(log, env_steps, proc, start, timeout):
    """Until a progress line past offset `start` reports more than `env_steps`."""
    deadline = time.monotonic() + timeout
    while max(_progress(open(log).read()[start:]), default=0) <= env_steps:
        assert time.monotonic() < deadline and proc.poll() is None, open(log).read()[-3000:]
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_run_outlives_a_killed_actor_worker_a_killed_learner_and_a_lost_node(
        tmp_path, cluster):
    root, log, proc = _endless_run(tmp_path, cluster)
    try:
        _wait_for(log, r"iteration \d+ \| env steps", proc, 240)
        # 1. The Ray worker that hosts actor 0, SIGKILLed: Ray restarts it, the actor runs again.
        table = _table()
        actor0 = next(pid for pid, cmd in _commands(table, root).items()
                      if "--task=0" in cmd and table[pid][0] not in _commands(table, root))
        worker = table[actor0][0]
        assert "CommandHost" in table[worker][2]
        mark = len(open(log).read())
        os.kill(worker, signal.SIGKILL)
        _wait_for(log, r"launch: actor 0 exited with signal SIGKILL; restart 1", proc, 60, mark)
        _wait_for(log, r"launch: actor 0 runs on node", proc, 60, mark)
        # 2. The learner SIGKILLed: it resumes from its checkpoint, env steps go on.
        _wait_for(log, r"checkpoints.py.*[Ss]aved|iteration [1-9]\d+ \|", proc, 120, mark)
        learner = next(pid for pid, cmd in _commands(_table(), root).items()
                       if "alf_async.train" in cmd)
        before = max(_progress(open(log).read()))
        mark = len(open(log).read())
        os.kill(learner, signal.SIGKILL)
        resumed = _wait_for(log, r"Resumed from .*ckpt-(\d+) at iteration (\d+)", proc, 120,
                            mark)
        assert int(resumed.group(2)) > 0
        # 3. The actors' node lost and another added: the actors move there.
        _wait_for(log, r"iteration \d+ \| env steps", proc, 120, mark + resumed.end())
        mark = len(open(log).read())
        old, new = cluster.replace_actor_node()
        for task in (0, 1):
            moved = _wait_for(log, rf"launch: actor {task} runs on node \S+ (\w+)", proc, 120,
                              mark)
            assert new.startswith(moved.group(1)) and not old.startswith(moved.group(1))
        # ... and training goes on with them, past the env steps before the learner's kill.
        _wait_past(log, before, proc, mark, 120)
        # 4. Ctrl-C: the learner checkpoints, exit 130 within 10 s, no command left.
        sessions = _sessions(root, _table())
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 128 + signal.SIGINT
        assert time.monotonic() - start < 10.0
        assert re.search(r"Interrupted by SIGTERM at iteration \d+; checkpoint saved",
                         open(log).read()[mark:])
        time.sleep(1.0)
        left = [pid for pid, (_, sid, _) in _table().items() if sid in sessions]
        assert not left and not _commands(_table(), root), open(log).read()[-2000:]
        # Ray's own reports of the lost node (a raylet's state dump) are in their file,
        # not on the console, which reads as the local backend's.
        assert "(raylet)" not in open(log).read()
        read = events.read_events(str(root))
        restarted = [(e["child"], e["reason"]) for e in read if e["event"] == "restarted"]
        killed = ("signal SIGKILL",) * 4  # the node's two actors in either order
        assert restarted[:2] + sorted(restarted[2:]) == list(zip(
            ["actor 0", "learner", "actor 0", "actor 1"], killed)), restarted
        assert any(e["event"] == "resumed" and e["pid"] != learner for e in read)
        stops = {e["process"]: e["status"] for e in read if e["event"] == "stopped"}
        assert stops["launch"] == 128 + signal.SIGINT
    finally:
        _stop(proc, root)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_two_learner_workers_placed_by_ray_train_in_step_each_with_its_actor(
        tmp_path, cluster):
    """`--learner_workers=2`: both workers on the learner's node (half its resource
    each), their TF_CONFIG built by the launch; each serves one actor."""
    root, log = tmp_path / "run", tmp_path / "launch.log"
    proc = _launch(tmp_path, cluster, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--learner_workers=2", '--learner_resources={"learner": 0.5}',
                   "--warm_spares=false", "--gin_param=train.num_iterations=6",
                   "--gin_param=train.num_env_steps=None", "--gin_param=train.stop_at_return=None",
                   "--gin_param=train.checkpoint_interval=3")
    try:
        assert proc.wait(timeout=400) == 0, open(log).read()[-3000:]
    finally:
        _stop(proc, root)
    chief, other = open(log).read(), open(root / "logs" / "learner_1.log").read()
    assert re.search(r"a learner on 2 workers \((127\.0\.0\.\d+):\d+, \1:\d+\)", chief)
    done = [re.search(r"Training done: \{'iteration': (\d+), 'env_steps': (\d+)", text).groups()
            for text in (chief, other)]
    assert done[0] == done[1] and done[0][0] == "6", done
    assert "num_workers = 2" in chief and "learner 1 exited" not in chief
    assert not _commands(_table(), root)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_learner_worker_killed_on_ray_restarts_both_from_the_chiefs_checkpoint(
        tmp_path, cluster):
    """Worker 1 of a Ray-placed learner SIGKILLed: its gang (the chief) is killed too,
    both start again on their hosts from the chief's checkpoint, one line, in step."""
    root, log = tmp_path / "run", tmp_path / "launch.log"
    proc = _launch(tmp_path, cluster, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--learner_workers=2", '--learner_resources={"learner": 0.5}',
                   "--warm_spares=false", "--gin_param=train.num_iterations=30",
                   "--gin_param=train.num_env_steps=None", "--gin_param=train.stop_at_return=None",
                   "--gin_param=train.checkpoint_interval=3")
    try:
        deadline = time.time() + 300
        while not (root / "checkpoints" / "checkpoint").exists():
            assert proc.poll() is None and time.time() < deadline, open(log).read()[-3000:]
            time.sleep(0.2)
        table = _table()
        [worker] = [pid for pid in _commands(table, root)
                    if "alf_async.train" in table[pid][2] and '"index": 1' in table[pid][2]]
        os.kill(worker, signal.SIGKILL)
        assert proc.wait(timeout=300) == 0, open(log).read()[-3000:]
    finally:
        _stop(proc, root)
    chief, other = open(log).read(), open(root / "logs" / "learner_1.log").read()
    assert chief.count("launch: learner 1 exited with signal SIGKILL; restarting all 2 "
                       "learner workers together") == 1
    resumed = re.findall(r"Resumed from .*ckpt-(\d+) at iteration (\d+)", chief)
    assert len(resumed) == 1 and resumed == re.findall(
        r"Resumed from .*ckpt-(\d+) at iteration (\d+)", other)
    done = [re.search(r"Training done: \{'iteration': (\d+), 'env_steps': (\d+)", text).groups()
            for text in (chief, other)]
    assert done[0] == done[1] and done[0][0] == "30", done
    assert not _commands(_table(), root)


def test_an_actors_server_follows_its_learner_worker_to_a_new_address():
    addresses = LearnerAddresses()
    addresses.placed("learner", "10.0.0.1", 8000)
    addresses.placed("learner 1", "10.0.0.2", 8000)
    argv = ["python", "-m", "alf_async.actor", "--server=10.0.0.1:8000", "--task=0"]
    spare = ["python", "-m", "alf_async.supervision.spare", *argv[2:]]
    assert addresses.current("actor 0", argv, spare) == (argv, spare)
    addresses.current("actor 1", ["--server=10.0.0.2:8000"])
    assert addresses.moved("learner", "10.0.0.1") == []  # restarted where it was
    assert addresses.moved("actor 0", "10.0.0.9") == []  # not a learner worker
    assert addresses.moved("learner", "10.0.0.7") == ["actor 0"]  # moved: its actors
    now, now_spare = addresses.current("actor 0", argv, spare)
    assert now[3] == now_spare[4] == "--server=10.0.0.7:8000" and now[4] == "--task=0"
    assert addresses.current("actor 1", ["--server=10.0.0.2:8000"])[0] == [
        "--server=10.0.0.2:8000"]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_learners_node_lost_its_actors_follow_it_to_its_new_address(tmp_path, cluster):
    """The learner's node removed and another added at a new address: Ray restarts the
    learner's host there, it resumes from its checkpoint, and the launch restarts the
    actors dialling its new address (their old one names a node that is gone)."""
    root, log, proc = _endless_run(tmp_path, cluster)
    try:
        _wait_for(log, r"checkpoints.py.*[Ss]aved|iteration [1-9]\d+ \|", proc, 240)
        before = max(_progress(open(log).read()))
        mark = len(open(log).read())
        old, new = cluster.replace_learner_node()
        _wait_for(log, rf"launch: learner runs on node {re.escape(new)} ", proc, 120, mark)
        for task in (0, 1):
            _wait_for(log, rf"launch: learner now runs at {re.escape(new)}; restarting "
                           rf"actor {task} to dial it", proc, 60, mark)
        _wait_for(log, r"Resumed from .*ckpt-\d+", proc, 120, mark)
        _wait_past(log, before, proc, mark, 150)
        servers = {re.search(r"--server=(\S+)", cmd).group(1)
                   for cmd in _commands(_table(), root).values() if "alf_async.actor" in cmd}
        assert servers and {s.rpartition(":")[0] for s in servers} == {new}, (old, servers)
    finally:
        _stop(proc, root)


def _sockets():
    """{inode: (local address hex, remote address hex)} of this host's TCP sockets."""
    sockets = {}
    for name in ("tcp", "tcp6"):
        with open(f"/proc/net/{name}") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                sockets[fields[9]] = (fields[1].split(":")[0], fields[2].split(":")[0])
    return sockets


def _loopback(address):
    """127.0.0.0/8 (the simulated nodes' addresses; IPv4 or mapped into IPv6), ::1,
    unbound IPv6."""
    mapped = address.startswith("0000000000000000FFFF0000") and len(address) == 32
    return (address.endswith("7F") and (len(address) == 8 or mapped)  # 127.x, little-endian
            or address in (_ANY4, _LOOPBACK6, "0" * 32))


@pytest.mark.slow  # each a launch on the module's Ray cluster (5 s to start)
@pytest.mark.parametrize("flags, line", [
    (['--learner_resources={"GPU": 1}'],
     "Bad setting: --learner_resources={'GPU': 1}: no node of the Ray cluster has them"),
    (['--actor_resources={"tpu": 8}'],
     "Bad setting: --actor_resources={'tpu': 8}: no node of the Ray cluster has them"),
    (["--learner_workers=2"],  # the head node's {"learner": 1} holds one
     "Bad setting: --learner_resources={'learner': 1}: the Ray cluster's nodes hold 1 of "
     "them at once, not the --learner_workers=2 that run together")])
def test_a_resource_no_node_has_is_one_line_and_exit_2(tmp_path, cluster, flags, line):
    proc = _launch(tmp_path, cluster, f"--root_dir={tmp_path / 'run'}", f"--gin_file={GIN}",
                   *flags)
    try:
        assert proc.wait(timeout=120) == 2
    finally:
        _stop(proc, tmp_path / "run")
    errors = [l for l in open(tmp_path / "launch.log") if l.startswith("E")]
    assert len(errors) == 1 and line in errors[0], errors


def _socket_inodes(pid):
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except (FileNotFoundError, PermissionError):
        return []
    return [link[len("socket:["):-1] for link in links if link.startswith("socket:[")]


@pytest.mark.slow
def test_the_clusters_processes_bind_and_reach_only_127_0_0_1(cluster):
    """Every socket of the Ray processes this module started (the GCS, the raylets, the
    hosts, their agents; not the run's commands), looked at every 0.2 s while the
    tests above ran, is on 127.0.0.1 and so is every peer. (Last in the module.)"""
    time.sleep(1.0)
    table = _table()
    names = " ".join(table[pid][2] for pid in _below(os.getpid(), table))
    assert "raylet" in names and "gcs_server" in names
    assert cluster.watch.looks >= 5 and len(cluster.watch.seen) >= 10
    assert cluster.watch.outside == []
