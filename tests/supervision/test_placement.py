"""Where the seeds of an experiment run: fakes for the retry and stop rules, and a real
experiment on a simulated Ray cluster of one host (slow) that loses a node mid-run.

Every wait is bounded; every process started is stopped by its PID in a `finally`,
and the cluster is shut down (never `ray stop`).
"""

import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest

from alf_async.experiments import cells, launcher, report
from alf_async.runs import layout
from alf_async.supervision import placement
from process_fakes import FakeProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["create_environment.num_parallel_environments=16",
        "AsyncOffPolicyDriver.unroll_length=16", "train.num_env_steps=None",
        "train.summary_interval=1", "train.log_interval_secs=1.0",
        "train.checkpoint_interval=2"]


def _seed_process(run_dir, lost=None, killed=False):
    """A seed that is `lost` (SIGKILLed on a lost node), `killed` here (SIGKILLed, its
    node fine) or else exits 0 with its result."""
    result = lambda: open(os.path.join(run_dir, layout.RESULT_FILE), "w").close()
    return FakeProcess(-signal.SIGKILL if lost or killed else 0, lost=lost,
                       on_success=result, address="127.0.0.9")


class FakePlacement:
    """Starts fake seeds (`_seed_process`): a run named in `losses` is lost that many
    times first."""

    def __init__(self, losses, retries):
        self.losses, self.retries, self.started, self.forgotten = dict(losses), retries, [], 0

    def capacity(self, parallel):
        return parallel

    def tf_threads(self, parallel):
        return 1

    def start(self, name, command, root_dir, relay=False):
        os.makedirs(root_dir, exist_ok=True)
        self.started.append(name)
        lost = self.losses.get(name, 0) > 0
        self.losses[name] = self.losses.get(name, 0) - 1
        return _seed_process(root_dir, lost="RayActorError" if lost else None)

    def forget(self, process):
        self.forgotten += 1


def _runs(tmp_path, seeds):
    cell = cells.make_cells(["c.gin"], [], [])[0]
    return launcher.seed_runs([cell], seeds, str(tmp_path))


def test_a_seed_whose_node_is_lost_runs_again_one_line_each_within_its_budget(tmp_path):
    lines = []
    runs = _runs(tmp_path, [1, 2, 3])
    fake = FakePlacement({"c/seed_2": 1, "c/seed_3": 3}, retries=2)
    seeds = launcher.Launcher(runs, parallel=3, poll_secs=0.0, echo=lines.append,
                              placement=fake)
    assert seeds.run() is None
    assert fake.started.count("c/seed_1") == 1 and fake.started.count("c/seed_2") == 2
    assert fake.started.count("c/seed_3") == 3  # the first start and its 2 retries
    assert fake.forgotten == 6  # every ended host is let go
    retries = [line for line in lines if "resuming from" in line]
    assert retries == [
        "c/seed_2: its node 127.0.0.9 was lost (RayActorError); resuming from its "
        "checkpoint on another node (retry 1 of 2)",
        "c/seed_3: its node 127.0.0.9 was lost (RayActorError); resuming from its "
        "checkpoint on another node (retry 1 of 2)",
        "c/seed_3: its node 127.0.0.9 was lost (RayActorError); resuming from its "
        "checkpoint on another node (retry 2 of 2)"]
    assert seeds.failed == {"c/seed_3": "its node was lost 3 times"}
    assert "c/seed_3 failed: its node was lost 3 times (--seed_retries=2)" in lines
    assert "seeds done 2/3, running 0, failed 1" in lines[-1]


def test_a_seed_killed_on_this_host_is_a_failure_not_a_retry(tmp_path):
    fake = FakePlacement({"c/seed_1": 1}, retries=3)
    fake.start = lambda name, command, root_dir, relay=False: _seed_process(root_dir,
                                                                           killed=True)
    seeds = launcher.Launcher(_runs(tmp_path, [1]), parallel=1, poll_secs=0.0,
                              echo=lambda line: None, placement=fake)
    seeds.run()
    assert list(seeds.failed) == ["c/seed_1"] and "exit -9" in seeds.failed["c/seed_1"]


def test_the_seeds_table_gets_a_node_column_only_for_seeds_run_on_a_cluster():
    seed = dict(seed=1, env_steps_to_target=None, seconds_to_target=None, best=1.0,
                final=1.0, last25_min=1.0, env_steps=10, seconds=1.0)
    local = dict(cells=[dict(name="c", seeds=[seed])])
    assert "node" not in report.seeds_table(local)
    placed = dict(cells=[dict(name="c", seeds=[dict(seed, nodes=["127.0.0.3", "127.0.0.5"])])])
    header, _, row = report.seeds_table(placed).splitlines()
    assert header.endswith("| node |") and row.endswith("| 127.0.0.3 → 127.0.0.5 |")


def test_a_runs_nodes_are_appended_in_order(tmp_path):
    assert layout.nodes_of(str(tmp_path)) == []
    layout.note_node(str(tmp_path), "127.0.0.3")
    layout.note_node(str(tmp_path), "127.0.0.5")
    assert layout.nodes_of(str(tmp_path)) == ["127.0.0.3", "127.0.0.5"]


class FakeRay:
    """The nodes Ray counts alive, on a clock of its own: node "n1" is marked dead at
    `dead_at` (never: None)."""

    def __init__(self, dead_at):
        self.now, self.dead_at, self.sleeps = 0.0, dead_at, 0

    def alive(self):
        return {"n2"} | ({"n1"} if self.dead_at is None or self.now < self.dead_at else set())

    def sleep(self, secs):
        self.sleeps += 1
        self.now += secs


@pytest.mark.parametrize("dead_at,settled_at", [(3.0, 3.0), (None, 13.0), (0.0, 0.0)])
def test_starts_wait_until_ray_marks_a_lost_runs_node_dead_at_most_its_window(
        dead_at, settled_at):
    ray = FakeRay(dead_at)
    lost = placement.LostNodes(ray.alive, window_secs=13.0, clock=lambda: ray.now,
                               sleep=ray.sleep)
    lost.lost(None)  # lost before it started: no node to wait for
    lost.settle()
    assert ray.sleeps == 0
    lost.lost("n1")
    lost.settle(poll_secs=0.5)
    assert ray.now == pytest.approx(settled_at)  # not sooner: Ray may place runs on n1
    sleeps = ray.sleeps
    lost.settle()  # once settled, a start waits no more
    assert ray.sleeps == sleeps


# --- a real experiment on a simulated cluster (slow) ---------------------------------


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    from alf_async.chaos.ray_cluster import SimulatedCluster
    previous = os.environ.get("RAY_TMPDIR")
    cluster = SimulatedCluster(actors=4, actor_nodes=2)  # 2 seeds' room on each worker node
    yield cluster
    cluster.shutdown()
    if previous is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = previous


def _experiment(out, cluster, iterations, seeds="1-4"):
    return [sys.executable, "-m", "alf_async.experiment", "run",
            "--gin_file=gin_configs/ppo_async.gin", f"--seeds={seeds}", "--parallel=8",
            f"--out={out}", "--target=20", *[f"--gin_param={p}" for p in TINY],
            f"--gin_param=train.num_iterations={iterations}", "--backend=ray",
            f"--address={cluster and cluster.address}", '--seed_resources={"actor": 1}']


def _wait(condition, proc, timeout, what):
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"the experiment ended before {what}"
        assert time.time() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.5)


def _checkpointed(run_dir):
    return (run_dir / "checkpoints").is_dir() and any(
        n.endswith(".index") for n in os.listdir(run_dir / "checkpoints"))


def _stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_four_seeds_over_two_nodes_one_lost_mid_run_each_finish_once(tmp_path, cluster):
    out, iterations = tmp_path / "exp", 60
    seed_dirs = {s: out / "ppo_async" / f"seed_{s}" for s in range(1, 5)}
    lost_ip = cluster.actor_nodes[0].node_ip_address
    on_lost = lambda: [s for s, d in seed_dirs.items() if layout.nodes_of(str(d))[:1] == [lost_ip]]
    proc = subprocess.Popen(_experiment(out, cluster, iterations), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: all(layout.nodes_of(str(d)) for d in seed_dirs.values()), proc, 120,
              "4 seeds placed")
        victims = on_lost()
        assert len(victims) == 2  # SPREAD: 2 seeds on each worker node
        _wait(lambda: all(_checkpointed(seed_dirs[s]) for s in victims), proc, 180,
              "checkpoints of the seeds on the node to lose")
        cell_json = (out / "ppo_async" / "cell.json").read_bytes()
        assert not any((seed_dirs[s] / "result.json").exists() for s in victims)
        cluster.replace_actor_node(0)
        output, _ = proc.communicate(timeout=400)
    finally:
        _stop(proc)
    assert proc.returncode == 0, output
    retried = sorted(int(line.split("seed_")[1].split(":")[0]) for line in output.splitlines()
                     if f"its node {lost_ip} was lost" in line)
    assert retried == sorted(victims), output
    assert all("(retry 1 of 3)" in line for line in output.splitlines() if "was lost" in line)
    assert "seeds done 4/4, running 0, failed 0" in output
    assert (out / "ppo_async" / "cell.json").read_bytes() == cell_json  # provenance unchanged
    for seed, run_dir in seed_dirs.items():
        log = (run_dir / "train.log").read_text()
        assert log.count("Training done:") == 1, seed  # none run twice to the end
        result = json.loads((run_dir / "result.json").read_text())
        assert result["iteration"] == iterations  # no iteration counted twice
        assert result["env_steps"] == iterations * 2 * 16 * 16
        nodes = layout.nodes_of(str(run_dir))
        if seed in victims:
            assert "Resumed from" in log and len(nodes) == 2 and nodes[1] != lost_ip
        else:
            assert "Resumed from" not in log and len(nodes) == 1
    summary = report.summarize([str(out)])
    reported = summary["experiments"][0]["cells"][0]["seeds"]
    assert [s["seed"] for s in reported] == [1, 2, 3, 4]
    from alf_async.runs.curves import load_curve
    for entry in reported:
        curve = load_curve(str(seed_dirs[entry["seed"]]))  # the seed's own events
        assert entry["env_steps"] == int(curve["env_steps"][-1])
        assert entry["final"] == pytest.approx(float(curve["value"][-1]))
        assert entry["nodes"] == layout.nodes_of(str(seed_dirs[entry["seed"]]))
    assert "| node |" in report.markdown(summary)


def _poll_until(process, what, timeout=120):
    deadline = time.time() + timeout
    while process.poll() is None and not what(process):
        assert time.time() < deadline, f"{process} not there in {timeout} s"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_run_started_right_after_a_loss_is_not_placed_on_the_node_just_lost(
        tmp_path, cluster):
    """A loss reaches the placement before Ray marks the node dead; a run started in
    between (a retry) went to the dead node and was lost again at once."""
    whole_node = {"actor": 2}  # all of an actor node's room (the fixture's 4 over 2)
    runs = placement.RayPlacement(cluster.address, whole_node, str(tmp_path), 3)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    start = lambda name: runs.start(name, sleeper, str(tmp_path / name))
    try:
        first = [start("a"), start("b")]  # one on each actor node: no room elsewhere
        for process in first:
            _poll_until(process, lambda p: p.address)
        index = [n.node_ip_address for n in cluster.actor_nodes].index(first[0].address)
        cluster.remove_actor_node(index)
        _poll_until(first[0], lambda p: False, timeout=60)
        assert first[0].lost and first[1].poll() is None
        runs.forget(first[0])
        again = start("a")  # before the new node joins: only the lost one had room
        new_node = cluster.add_actor_node(index)
        _poll_until(again, lambda p: p.address)
        assert again.lost is None and again.address == new_node.node_ip_address
    finally:
        runs.close()


@pytest.mark.slow
def test_an_out_a_node_cannot_write_is_refused_in_one_line(tmp_path, cluster):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ValueError) as error:
        placement.RayPlacement(cluster.address, {"actor": 1}, str(blocker / "out"), 3)
    message = str(error.value)
    assert message.startswith(f"--out='{blocker / 'out'}' is not writable on node 127.0.0.")
    assert "storage that the nodes share" in message and "\n" not in message


def _ray_temp_folders():
    return {n for n in os.listdir("/tmp") if n.startswith("alf_ray_")
            and not n.startswith("alf_ray_cluster_")}


def _many_runs_command(command, out):
    """`command` (experiment, tune or pbt) on a Ray of its own, with a long budget."""
    if command == "experiment":
        return [arg for arg in _experiment(out, None, 100_000, seeds="1-2")
                if not arg.startswith(("--address", "--seed_resources"))]
    gin = ["--gin_file=gin_configs/ppo_async.gin",
           *[f"--gin_param={p}" for p in TINY if "num_env_steps" not in p]]
    if command == "tune":
        space = out / "space.yaml"
        os.makedirs(out)
        space.write_text("alf_async.Learner.learning_rate: {low: 1.0e-4, high: 1.0e-2}\n")
        return [sys.executable, "-m", "alf_async.tune", *gin, f"--space={space}",
                f"--storage=sqlite:///{out / 'study.db'}", "--trials=2", "--workers=2",
                "--backend=ray", "--gin_param=train.num_iterations=100000",
                "--gin_param=train.num_env_steps=None"]
    return [sys.executable, "-m", "alf_async.pbt", *gin, f"--root_dir={out}",
            "--population=2", "--quantile=0.5", "--parallel=2", "--interval_env_steps=10000000",
            "--mutate=alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)", "--backend=ray"]


@pytest.mark.slow
@pytest.mark.parametrize("command,signum", [("experiment", signal.SIGINT),
                                            ("experiment", signal.SIGKILL),
                                            ("tune", signal.SIGINT), ("pbt", signal.SIGINT)])
@pytest.mark.alone
def test_a_many_runs_command_on_a_ray_of_its_own_leaves_nothing_5_s_after_its_end(
        tmp_path, command, signum):
    """Stopped once 2 of its runs have a checkpoint: a Ctrl-C stops each run with a
    checkpoint and exits 130; after it or a SIGKILL, no process of it or of its Ray,
    and no Ray temp folder, is left 5 s later."""
    pytest.importorskip("ray")
    from alf_async.supervision.reaper import descendants, start_time
    out, before, seen = tmp_path / "out", _ray_temp_folders(), {}
    proc = subprocess.Popen(_many_runs_command(command, out), cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def checkpointed():
            seen.update(descendants(proc.pid))  # Ray's processes and the runs'
            return len([d for d in out.glob("**/checkpoints") if _checkpointed(d.parent)]) >= 2
        _wait(checkpointed, proc, 240, "2 runs' checkpoints")
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=200)
        end = time.monotonic()
        alive = lambda: [pid for pid, started in seen.items() if start_time(pid) == started]
        while (alive() or _ray_temp_folders() - before) and time.monotonic() - end < 5:
            time.sleep(0.1)
        assert not alive(), f"outlived {command} by 5 s: {alive()}"
        assert not _ray_temp_folders() - before
    finally:
        _stop(proc)
    if signum == signal.SIGKILL:
        return
    assert proc.returncode == 128 + signal.SIGINT, output[-3000:]
    logs = [d.parent / "train.log" for d in out.glob("**/checkpoints")]
    for log in logs:
        text = log.read_text()
        assert text.rindex("checkpoint saved") > text.index("Interrupted by SIGTERM"), log


def test_parallel_0_runs_one_locally_and_as_many_as_a_ray_cluster_holds():
    """`experiment run`'s default: what docs/experiments.md says of a cluster."""
    assert placement.LocalPlacement().capacity(0) == 1
    assert placement.LocalPlacement().capacity(3) == 3
    cluster = types.SimpleNamespace(room=6)
    assert placement.RayPlacement.capacity(cluster, 0) == 6
    assert placement.RayPlacement.capacity(cluster, 2) == 2
    assert placement.RayPlacement.capacity(cluster, 9) == 6
