"""`python -m alf_async.pbt`: bad input, and a small population of real runs (slow)."""

import json
import os
import subprocess
import sys

import pytest

from alf_async import events
from alf_async.runs import curves
from alf_async.population import lineage

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LR = "--mutate=alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)"


def _pbt(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "alf_async.pbt", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


WIDE = ["--gin_param=WIDTH=64", "--gin_param=PPOAlgorithm.actor_fc_layers=(%WIDTH, %WIDTH)"]


@pytest.mark.parametrize("args, line", [
    ([*WIDE, LR, "--mutate=WIDTH:uniform(32,128)"],  # a network's size
     "--mutate=WIDTH: it changes the shape of the algorithm's variable "
     "ActorDistributionNetwork/EncodingNetwork/dense/kernel:0 from [4, 32] at LOW to [4, 128]"),
    (["--mutate=AsyncOffPolicyDriver.unroll_length:uniform(8,32)"],  # T
     "--mutate=AsyncOffPolicyDriver.unroll_length: it changes the learn batch [Q, T, E x B] "
     "from [2, 8, 64] at LOW to [2, 32, 64] at HIGH"),
    (["--mutate=alf_async.Lerner.num_epochs:uniform(2,8)"],
     "the population's config does not build: "),
    ([LR, "--population=1"], "--population must be >= 2, got 1"),
    ([LR, "--quantile=0.8"], "--quantile must be in (0, 0.5], got 0.8"),
    ([LR, "--population=2"], "--population=2 --quantile=0.25: no member is in the bottom "
     "quantile, so none would ever exploit (give --quantile >= 0.5, or more members)"),
    ([LR, "--perturb_factors=0.5,x"], "--perturb_factors must be numbers above 0, got 0.5,x"),
    ([LR, "--perturb_factors=0,2"], "--perturb_factors must be numbers above 0, got 0.0,2.0"),
    (["--mutate=PPOAlgorithm.clip_ratio:uniform(0.3,0.1)"], "needs LOW < HIGH"),
    ([LR, "--tracker=tensorboard"], "--tracker must be one of none, mlflow, wandb")])
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(tmp_path, args, line):
    result = _pbt("--gin_file=gin_configs/ppo_async.gin", f"--root_dir={tmp_path / 'p'}",
                  *args, timeout=180)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and line in errors[0]
    assert not (tmp_path / "p").exists()


def test_an_unknown_subcommand_is_exit_2(tmp_path):
    assert _pbt("reprot", str(tmp_path)).returncode == 2


@pytest.mark.slow  # 2 members x 2 generations of real training, a report and a replay
def test_a_small_population_exploits_and_every_member_trains_with_what_it_was_given(
        tmp_path):
    root = tmp_path / "pbt"
    result = _pbt("--gin_file=gin_configs/ppo_async.gin", f"--root_dir={root}",
                  "--population=2", "--interval_env_steps=4096", "--generations=2",
                  "--quantile=0.5", "--seed=3", LR,
                  "--mutate=PPOAlgorithm.clip_ratio:uniform(0.1,0.3)",
                  "--mutate=alf_async.Learner.num_epochs:uniform(2,6)",  # none in a variable
                  "--mutate=PPOAlgorithm.gae_lambda:uniform(0.9,1)", timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    records = lineage.read(str(root))
    assert sorted((r["member"], r["generation"]) for r in records) == [
        (0, 1), (0, 2), (1, 1), (1, 2)]
    [copied] = [r for r in records if r["parent"] != r["member"]]
    parent = next(r for r in records if (r["member"], r["generation"]) == (copied["parent"], 1))
    # read independently of the controller: what the copied member's run itself reported
    member_events = events.read_events(str(root / f"member_{copied['member']}"))
    reports = [e for e in member_events if e["event"] == "trains_with"]
    assert len(reports) == 2
    assert reports[1]["weights"] == parent["weights"]  # it restored the parent's checkpoint
    for setting in ("learning_rate", "alf_async.Learner.num_epochs", "PPOAlgorithm.gae_lambda"):
        assert reports[1]["settings"][setting] == pytest.approx(
            copied["settings"][setting], rel=1e-6), setting
    assert isinstance(copied["settings"]["alf_async.Learner.num_epochs"], int)
    assert copied["settings"] != parent["settings"]  # explored
    for member in (0, 1):
        with open(root / f"member_{member}" / "result.json") as f:
            assert json.load(f)["env_steps"] == 8192
    for r in records:  # the table's score is the plot's point at the same ready point
        curve = curves.load_curve(str(root / f"member_{r['member']}"))
        at = curve["value"][curve["env_steps"] == r["env_steps"]]
        assert len(at) and at[-1] == pytest.approx(r["score"], abs=1e-4), r
    report = _pbt("report", str(root))
    assert report.returncode == 0 and "| member | generation | parent |" in report.stdout
    assert (root / "pbt" / "curves.png").stat().st_size > 10_000
    replay = _pbt("replay", str(root), str(copied["member"]), timeout=300)
    assert replay.returncode == 0, replay.stderr[-3000:]
    with open(root / f"replay_{copied['member']}" / "result.json") as f:
        assert json.load(f)["env_steps"] == 8192


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_members_on_a_cluster_one_node_lost_mid_interval_resume_and_pass_their_checks(
        tmp_path):
    """2 members on simulated nodes (one each); the node of one is removed mid-interval:
    it resumes on the replacement node from its own checkpoint, one line says so, and
    every check of what it trains with still holds."""
    import time  # pylint: disable=import-outside-toplevel
    pytest.importorskip("ray")
    from alf_async.runs import layout  # pylint: disable=import-outside-toplevel
    from alf_async.chaos.ray_cluster import SimulatedCluster  # pylint: disable=import-outside-toplevel
    previous = os.environ.get("RAY_TMPDIR")
    cluster = SimulatedCluster(actors=2, actor_nodes=2)
    root, proc = tmp_path / "pbt", None
    lost_ip = cluster.actor_nodes[0].node_ip_address
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "alf_async.pbt", "--gin_file=gin_configs/ppo_async.gin",
             f"--root_dir={root}", "--population=2", "--interval_env_steps=30720",
             "--generations=2", "--quantile=0.5", "--seed=3", LR,
             "--gin_param=create_environment.num_parallel_environments=16",
             "--gin_param=AsyncOffPolicyDriver.unroll_length=16",
             "--gin_param=train.checkpoint_interval=2", "--backend=ray",
             f"--address={cluster.address}", '--member_resources={"actor": 1}'],
            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        dirs = [root / f"member_{i}" for i in (0, 1)]
        deadline = time.time() + 240
        while True:
            victims = [d for d in dirs if layout.nodes_of(str(d)) == [lost_ip]]
            if victims and (victims[0] / "checkpoints").is_dir() and any(
                    n.endswith(".index") for n in os.listdir(victims[0] / "checkpoints")):
                break
            assert proc.poll() is None and time.time() < deadline, "no member checkpoint"
            time.sleep(0.5)
        assert not (victims[0] / "result.json").exists()  # mid-interval
        cluster.replace_actor_node(0)
        output, _ = proc.communicate(timeout=500)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
    assert proc.returncode == 0, output[-4000:]
    victim = int(victims[0].name.split("_")[1])
    assert output.count(f"member {victim}'s node {lost_ip} was lost") == 1, output[-4000:]
    assert "(retry 1 of 3)" in output
    assert len(lineage.read(str(root))) == 4
    nodes = layout.nodes_of(str(victims[0]))
    assert len(nodes) == 3 and nodes[1] != lost_ip  # generation 1 twice, then generation 2
    starts = [e for e in events.read_events(str(victims[0])) if e["event"] == "trains_with"]
    assert len(starts) == 3 and starts[1]["env_steps"] > 0  # resumed its own checkpoint
