"""`python -m alf_async.experiment`: seeds of a tiny CartPole budget as real processes.

Every process is started by the test or by the launcher it starts; each wait
is bounded, and the test checks by PID that no child outlives the launcher.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from alf_async.supervision import reaper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["create_environment.num_parallel_environments=16", "AsyncOffPolicyDriver.unroll_length=16",
        "train.num_env_steps=None", "train.summary_interval=1", "train.log_interval_secs=1.0"]


def experiment(args, timeout=240):
    return subprocess.run([sys.executable, "-m", "alf_async.experiment", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def run_args(out, iterations, seeds="1-2", extra=()):
    return ["run", "--gin_file=gin_configs/ppo_async.gin", f"--seeds={seeds}", "--parallel=2",
            f"--out={out}", "--target=20", *[f"--gin_param={p}" for p in TINY],
            f"--gin_param=train.num_iterations={iterations}", *extra]


def children_of(pid):
    """`pid`'s children, but its watcher (`reaper.guard`'s)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split() if not reaper.is_watcher(int(p))]
    except FileNotFoundError:
        return []


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_two_seeds_in_parallel_then_skipped_then_reported(tmp_path):
    out = tmp_path / "exp"
    first = experiment(run_args(out, 4))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "seeds done 2/2, running 0, failed 0" in first.stdout
    for seed in (1, 2):
        run_dir = out / "ppo_async" / f"seed_{seed}"
        result = json.loads((run_dir / "result.json").read_text())
        assert result["iteration"] == 4
        assert "train.seed = %d" % seed in (run_dir / "operative_config.gin").read_text()
        assert os.listdir(run_dir / "checkpoints") and os.listdir(run_dir / "train")
    second = experiment(run_args(out, 4))
    assert second.returncode == 0 and "2 of 2 seeds already done: skipped" in second.stdout
    # the second command started no run: each log holds one run
    assert (out / "ppo_async" / "seed_1" / "train.log").read_text().count("Imports:") == 1
    rep = experiment(["report", str(out), f"--out={tmp_path / 'report'}"])
    assert rep.returncode == 0, rep.stderr
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    seeds = summary["experiments"][0]["cells"][0]["seeds"]
    assert [s["seed"] for s in seeds] == [1, 2] and all(s["finished"] for s in seeds)
    assert all(s["env_steps"] == 4 * 2 * 16 * 16 for s in seeds)  # iterations * Q * T * B
    assert (tmp_path / "report" / "curves.png").exists()


@pytest.mark.slow
def test_a_failing_cell_is_reported_and_the_others_finish(tmp_path):
    out = tmp_path / "exp"
    result = experiment(run_args(out, 2, seeds="1", extra=[
        "--grid=create_environment.env_name=['CartPole-v1', 'NoSuchEnv-v0']"]))
    assert result.returncode == 1
    assert (out / "env_name=CartPole-v1" / "seed_1" / "result.json").exists()
    assert "env_name=NoSuchEnv-v0/seed_1 failed (exit 2)" in result.stdout
    assert "NoSuchEnv-v0" in result.stdout.split("failed (exit 2):")[1].splitlines()[0]
    assert "failed 1" in result.stdout


@pytest.mark.slow
def test_sigint_stops_every_child_with_a_checkpoint_and_a_rerun_resumes(tmp_path):
    out = tmp_path / "exp"
    args = run_args(out, 100_000, extra=["--gin_param=train.checkpoint_interval=2"])
    proc = subprocess.Popen([sys.executable, "-m", "alf_async.experiment", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        ckpts = [out / "ppo_async" / f"seed_{s}" / "checkpoints" for s in (1, 2)]
        while not all(c.exists() and os.listdir(c) for c in ckpts):
            assert time.time() < deadline and proc.poll() is None, "no checkpoints in 120 s"
            time.sleep(0.5)
        children = children_of(proc.pid)
        assert len(children) == 2
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, output
    assert "stopped 2 running seeds" in output
    assert not any(alive(pid) for pid in children)
    for seed in (1, 2):
        log = (out / "ppo_async" / f"seed_{seed}" / "train.log").read_text()
        assert "Interrupted by SIGTERM" in log and "checkpoint saved" in log
    # Another budget is another setting: refused in one line, nothing started.
    other = experiment(run_args(out, 2))
    assert other.returncode == 2 and "holds seeds made otherwise" in other.stderr
    assert "binding 'train.num_iterations=100000' removed" in other.stderr
    # The same command again: each seed resumes from its checkpoint (stopped once it has).
    again = subprocess.Popen([sys.executable, "-m", "alf_async.experiment", *args], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    logs = [out / "ppo_async" / f"seed_{s}" / "train.log" for s in (1, 2)]
    try:
        deadline = time.time() + 120
        while not all(log.exists() and "Resumed from" in log.read_text() for log in logs):
            assert time.time() < deadline and again.poll() is None, "no resume in 120 s"
            time.sleep(0.5)
        again.send_signal(signal.SIGINT)
        output, _ = again.communicate(timeout=150)
    finally:
        if again.poll() is None:
            again.kill()
            again.wait(timeout=30)
    assert again.returncode == 128 + signal.SIGINT, output


def test_bad_flags_are_one_line_errors(tmp_path):
    no_out = experiment(["run", "--gin_file=gin_configs/ppo_async.gin"], timeout=60)
    assert no_out.returncode == 2 and "run needs --out" in no_out.stderr
    bad_seeds = experiment(["run", "--gin_file=gin_configs/ppo_async.gin", "--seeds=3-1",
                            f"--out={tmp_path}"], timeout=60)
    assert bad_seeds.returncode == 2 and "--seeds must be" in bad_seeds.stderr
    missing = experiment(["run", "--gin_file=nope.gin", f"--out={tmp_path}"], timeout=60)
    assert missing.returncode == 2 and "--gin_file=nope.gin does not exist" in missing.stderr
    empty = experiment(["report", str(tmp_path)], timeout=60)
    assert empty.returncode == 2 and "holds no experiment cells" in empty.stderr
    assert "Traceback" not in no_out.stderr + bad_seeds.stderr + missing.stderr + empty.stderr


def test_a_mistyped_subcommand_is_one_line_with_the_nearest_and_exit_2():
    typo = experiment(["reprot"], timeout=60)
    errors = [line for line in typo.stderr.splitlines() if line.startswith("E")]
    assert typo.returncode == 2 and len(errors) == 1
    assert errors[0].endswith("unknown subcommand 'reprot' (did you mean report?)")
    assert "--gin_file" not in typo.stderr + typo.stdout  # not the whole help
    none = experiment([], timeout=60)
    assert none.returncode == 2 and "a subcommand is needed; usage:" in none.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_pbt_cell_beside_its_random_search_reports_each_population_as_a_seed(tmp_path):
    """`--runner=pbt --grid='--exploit=[true, false]'`: one population per seed and
    cell; the report reads each as a run: its curve the best member per ready point."""
    out = tmp_path / "exp"
    result = experiment([
        "run", "--runner=pbt", "--gin_file=gin_configs/ppo_async.gin", "--seeds=1",
        f"--out={out}", "--target=30", "--grid=--exploit=[true, false]",
        *[f"--gin_param={p}" for p in TINY if "num_env_steps" not in p],
        "--gin_param=--population=2", "--gin_param=--interval_env_steps=2048",
        "--gin_param=--generations=2", "--gin_param=--quantile=0.5",
        "--gin_param=--mutate=alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)"],
        timeout=500)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rep = experiment(["report", str(out), f"--out={tmp_path / 'report'}"])
    assert rep.returncode == 0, rep.stderr[-3000:]
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    cells = {c["name"]: c for c in summary["experiments"][0]["cells"]}
    assert sorted(cells) == ["exploit=false", "exploit=true"]
    from alf_async.population import lineage  # pylint: disable=import-outside-toplevel
    for name, cell in cells.items():
        [seed] = cell["seeds"]
        root = out / name / "seed_1"
        records = lineage.read(str(root))
        assert seed["finished"] and len(seed["curve"]["value"]) == 2
        best = [max(r["score"] for r in records if r["generation"] == g) for g in (1, 2)]
        assert seed["curve"]["value"] == pytest.approx(best, abs=1e-3)
        assert any(r["parent"] != r["member"] for r in records) == (name == "exploit=true")


@pytest.mark.parametrize("flag, line", [
    ("--address=127.0.0.1:1", "--address needs --backend=ray"),
    ("--parallel=-1", "--parallel must be >= 0, got -1")])
def test_a_run_refused_for_a_bad_setting_leaves_nothing_in_its_out(tmp_path, flag, line):
    """A later run into the same --out is not refused as 'seeds made otherwise'."""
    out = tmp_path / "exp"
    refused = experiment(["run", "--gin_file=gin_configs/ppo_async.gin", f"--out={out}", flag],
                         timeout=60)
    errors = [l for l in refused.stderr.splitlines() if l.startswith("E")]
    assert refused.returncode == 2 and len(errors) == 1 and errors[0].endswith(line)
    assert not out.exists()
