"""`python -m alf_async.launch`: bad flags, and a supervised learner with two actors.

Every process is waited for with a bound; the launch and every process of
its children's sessions are killed by PID in a `finally`.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from alf_async.supervision import reaper
from alf_async.supervision.spare import NORMAL_PRIORITY, can_wait_idle, waiting

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIN = "gin_configs/ppo_remote.gin"


def _launch(tmp_path, *flags, log="launch.log"):
    out = open(tmp_path / log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "alf_async.launch", *flags], cwd=ROOT,
                            stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return proc


def _processes():
    """{pid: (ppid, session id)} of every live, non-zombie process."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def _sessions_of_children(pid):
    """The sessions of `pid`'s children, but its watcher's (`reaper.guard`'s)."""
    return {sid for child, (ppid, sid) in _processes().items()
            if ppid == pid and not reaper.is_watcher(child)}


# The learner's and two actors' sessions, and their warm spares' where they can wait idle.
SESSIONS = 6 if can_wait_idle() else 3


def _is_learner(pid):
    """The learner, cold or a promoted spare (not a spare that waits)."""
    try:
        with open(f"/proc/{pid}/comm") as comm, open(f"/proc/{pid}/cmdline") as cmdline:
            argv = cmdline.read().split("\0")
            return "alf_async.train" in argv and not waiting(argv, comm.read().strip())
    except FileNotFoundError:
        return False


def _left_in(sessions):
    return [pid for pid, (_, sid) in _processes().items() if sid in sessions]


def _kill(proc, sessions):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    for pid in _left_in(sessions):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("flags, line", [
    (["--actors=0"], "Bad setting: --actors must be >= 1, got 0"),
    (["--actors=1", "--learner_workers=2"], "Bad setting: --learner_workers must be in "
     "[1, --actors=1] (each worker serves its own actors), got 2"),
    (["--gin_file=gin_configs/ppo_remot.gin"],
     "Bad setting: --gin_file=gin_configs/ppo_remot.gin does not exist; did you mean "
     "gin_configs/ppo_remote.gin?"),
    (["--max_restarts=-1"], "Bad setting: --max_restarts must be >= 0, got -1"),
    (["--learner_spares=0"], "Bad setting: --learner_spares must be >= 1 (--nowarm_spares: "
                             "none), got 0"),
    (["--port=70000"], "Bad setting: --port must be in [0, 65535], got 70000"),
    (["--address=auto"], "Bad setting: --address needs --backend=ray"),
    (["--backend=ray", "--learner_resources=GPU"],
     "Bad setting: --learner_resources must be a JSON object, got 'GPU' (Expecting value)"),
    (["--backend=ray", '--actor_resources={"actor": -1}'],
     'Bad setting: --actor_resources must map resource names to amounts >= 0, got '
     '\'{"actor": -1}\''),
    (["--backend=ray", "--address=127.0.0.1:1"],
     "Bad setting: --address=127.0.0.1:1: no Ray cluster answers there (Connection refused)")])
def test_bad_flags_exit_2_with_one_line_naming_the_flag(tmp_path, flags, line):
    proc = _launch(tmp_path, f"--root_dir={tmp_path / 'run'}", f"--gin_file={GIN}", *flags)
    assert proc.wait(timeout=60) == 2
    errors = [l for l in open(tmp_path / "launch.log") if l.startswith("E")]
    assert len(errors) == 1 and errors[0].rstrip().endswith(line), errors
    assert not (tmp_path / "run").exists()  # a launch that started nothing leaves no folder


def test_the_ray_backend_without_ray_names_the_extra(tmp_path):
    """Ray not installed (its import fails): one line naming the extra, exit 2."""
    code = ("import sys; sys.modules['ray'] = None; sys.argv[0] = 'launch'; "
            "from alf_async import config, launch; config.run_command(launch.main)")
    result = subprocess.run([sys.executable, "-c", code, f"--root_dir={tmp_path / 'run'}",
                             f"--gin_file={GIN}", "--backend=ray"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and errors[0].endswith(
        "Missing package: --backend=ray needs the [ray] extra: pip install '.[ray]'"), \
        result.stderr
    assert not (tmp_path / "run").exists()


def _wait_for_line(path, pattern, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, open(path).read())
        if found:
            return found
        assert proc.poll() is None, open(path).read()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {timeout} s: {open(path).read()[-3000:]}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_learner_is_restarted_resumes_and_the_run_reaches_475(tmp_path):
    root = tmp_path / "run"
    proc = _launch(tmp_path, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--gin_param=train.checkpoint_interval=10",
                   "--gin_param=train.stop_at_return=475.0",
                   "--gin_param=train.num_env_steps=3000000")
    sessions = set()
    try:
        _wait_for_line(tmp_path / "launch.log", r"iteration \d+ \| env steps", proc, 240)
        deadline = time.monotonic() + 120
        while not os.path.exists(root / "checkpoints" / "checkpoint"):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        sessions = _sessions_of_children(proc.pid)
        assert len(sessions) == SESSIONS
        learner_pid = [pid for pid, (ppid, sid) in _processes().items()
                       if ppid == proc.pid and _is_learner(pid)]
        assert len(learner_pid) == 1
        os.kill(learner_pid[0], signal.SIGKILL)
        assert proc.wait(timeout=500) == 0, open(tmp_path / "launch.log").read()[-3000:]
        log = open(tmp_path / "launch.log").read()
        assert "launch: learner exited with signal SIGKILL; restart 1 in" in log
        assert re.search(r"Resumed from .*ckpt-\d+ at iteration [1-9]", log)
        assert "launch: learner finished; stopping the others" in log
        result = json.load(open(root / "result.json"))
        assert result["average_return"] >= 475.0
        assert not _left_in(sessions), "processes outlived the launch"
        _assert_events_tell_the_same(str(root), learner_pid[0])
    finally:
        _kill(proc, sessions)


def _assert_events_tell_the_same(root, killed_pid):
    """The typed events of the run: what the log said, read without its lines."""
    from alf_async.events import read_events  # pylint: disable=import-outside-toplevel
    read = read_events(root)
    learners = sorted({e["pid"] for e in read if e["process"] == "learner"})
    assert len(learners) == 2 and killed_pid in learners  # the first, killed, and its restart
    restarted = [e for e in read if e["event"] == "restarted"]
    assert [(e["child"], e["reason"], e["restart"]) for e in restarted] == [
        ("learner", "signal SIGKILL", 1)]
    resumed = [e for e in read if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["pid"] != killed_pid and resumed[0]["iteration"] >= 1
    assert any(e["event"] == "reached_target" for e in read)
    stops = {e["process"]: e["status"] for e in read if e["event"] == "stopped"}
    assert stops["launch"] == 0 and stops["learner"] == 0  # the killed one wrote none
    assert {"actor 0", "actor 1"} <= {e["process"] for e in read if e["event"] == "started"}


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_stops_everything_within_5_s_after_a_learner_checkpoint(tmp_path):
    root = tmp_path / "run"
    proc = _launch(tmp_path, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--gin_param=train.num_env_steps=100000000")
    sessions = set()
    try:
        _wait_for_line(tmp_path / "launch.log", r"iteration \d+ \| env steps", proc, 240)
        sessions = _sessions_of_children(proc.pid)
        assert len(sessions) == SESSIONS
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert time.monotonic() - start <= 5.0
        assert not _left_in(sessions), "processes outlived the launch"
        log = open(tmp_path / "launch.log").read()
        saved = re.search(r"Interrupted by SIGTERM at iteration (\d+); checkpoint saved", log)
        assert saved, log[-3000:]
        assert os.path.exists(root / "checkpoints" / f"ckpt-{saved.group(1)}.index")
    finally:
        _kill(proc, sessions)


def test_the_learners_spare_gets_ready_at_normal_priority_and_the_actors_at_idle(tmp_path):
    """Training stops while the learner is down, so its spare must be ready soon on
    a loaded machine; an actor's may wait for idle cores (the others feed). (In a
    process of its own: importing the launch defines its flags.)"""
    script = textwrap.dedent(f"""
        import json
        from alf_async.supervision.commands import LearnerWorker, child_specs
        workers = [LearnerWorker("127.0.0.1", 1)]
        specs = [child_specs({str(tmp_path)!r}, ["ppo_remote.gin"], [], 2, workers,
                             warm_spares=True, learner_spares=2),
                 child_specs({str(tmp_path)!r}, ["ppo_remote.gin"], [], 1, workers)]
        print(json.dumps([[(s.argv, s.spare_argv, s.spares) for s in group]
                          for group in specs]))
        """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    (warm, bare) = json.loads(out.stdout.strip().splitlines()[-1])
    (learner_argv, learner_spare, learner_spares), *actors = warm
    assert learner_spare[2:5] == ["alf_async.supervision.spare", NORMAL_PRIORITY, "alf_async.train"]
    assert learner_spare[5:] == learner_argv[3:]
    assert learner_spares == 2  # the learner keeps the spares asked; each actor one
    for _, actor_spare, actor_spares in actors:
        assert actor_spare[2:4] == ["alf_async.supervision.spare", "alf_async.actor"]
        assert actor_spares == 1
    assert [spare for _, spare, _ in bare] == [None, None]


def _descendants(pid):
    table = _processes()
    below, grew = {pid}, True
    while grew:
        more = {p for p, (ppid, _) in table.items() if ppid in below} - below
        below, grew = below | more, bool(more)
    return below - {pid}


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_on_a_ray_launch_stops_its_ray_too_within_10_s_with_130(tmp_path):
    """Without --address the launch starts a Ray of its own (on 127.0.0.1, no usage
    statistics); Ctrl-C checkpoints the learner, exits 130 and leaves no process:
    not the commands, not the Ray hosts, not the Ray (raylet, GCS) itself."""
    root = tmp_path / "run"
    proc = _launch(tmp_path, f"--root_dir={root}", "--gin_file=gin_configs/ppo_chaos.gin",
                   "--backend=ray", "--actors=2", "--gin_param=train.stop_at_return=None")
    below = set()
    try:
        _wait_for_line(tmp_path / "launch.log", r"iteration \d+ \| env steps", proc, 240)
        below = _descendants(proc.pid)
        names = " ".join(open(f"/proc/{pid}/cmdline").read() for pid in below
                         if os.path.exists(f"/proc/{pid}/cmdline"))
        assert "raylet" in names and "alf_async.train" in names and "alf_async.actor" in names
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 128 + signal.SIGINT
        assert time.monotonic() - start < 10.0
        log = open(tmp_path / "launch.log").read()
        assert re.search(r"Interrupted by SIGTERM at iteration \d+; checkpoint saved", log)
        deadline = time.monotonic() + 5
        while set(_processes()) & below and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not set(_processes()) & below, "processes outlived the launch"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in set(_processes()) & below:
            os.kill(pid, signal.SIGKILL)


def test_a_bucket_root_dir_keeps_the_actor_logs_on_each_node_and_the_url_whole(tmp_path):
    """A bucket cannot be appended to: the actors' logs go to the node's temp dir; the
    URL reaches every process as it is (no local 'gs:' folder made by the launch)."""
    from alf_async.supervision import commands  # pylint: disable=import-outside-toplevel
    specs = commands.child_specs("gs://bucket/runs/x", [GIN], [], actors=2,
                                 workers=[commands.LearnerWorker("10.0.0.2", 8000)])
    assert [s.log_path for s in specs] == [None] + [
        os.path.join(commands.log_dir("gs://bucket/runs/x"), f"actor_{i}.log") for i in (0, 1)]
    assert commands.log_dir("gs://bucket/runs/x").startswith(tempfile.gettempdir())
    assert "--root_dir=gs://bucket/runs/x" in specs[0].argv
    assert "--server=10.0.0.2:8000" in specs[2].argv and "--task=1" in specs[2].argv
    assert commands.log_dir(str(tmp_path)) == str(tmp_path / "logs")
    assert not os.path.exists("gs:")


def test_a_learner_of_two_workers_is_two_train_commands_each_serving_its_actors(tmp_path):
    """The chief (the primary, on the console) and worker 1 (its exit 0 its own end, its
    log a file), each with TF_CONFIG's JSON naming both all-reduce addresses and its
    index; actor task i dials worker i mod 2."""
    from alf_async.supervision import commands  # pylint: disable=import-outside-toplevel
    workers = [commands.LearnerWorker("10.0.0.1", 8000, 9000),
               commands.LearnerWorker("10.0.0.2", 8001, 9001)]
    specs = commands.child_specs(str(tmp_path), [GIN], ["train.seed=3"], actors=3,
                                 workers=workers)
    assert [s.name for s in specs] == ["learner", "learner 1", "actor 0", "actor 1", "actor 2"]
    assert [(s.primary, s.finishes) for s in specs[:2]] == [(True, False), (False, True)]
    assert specs[0].log_path is None
    assert specs[1].log_path == str(tmp_path / "logs" / "learner_1.log")
    for index, spec in enumerate(specs[:2]):
        assert f"--serve_port={8000 + index}" in spec.argv
        assert "--gin_param=create_strategy.kind='multi_worker'" in spec.argv
        tf_config = json.loads(next(a for a in spec.argv if a.startswith("--tf_config="))
                               .split("=", 1)[1])
        assert tf_config == {"cluster": {"worker": ["10.0.0.1:9000", "10.0.0.2:9001"]},
                             "task": {"type": "worker", "index": index}}
    servers = [next(a for a in s.argv if a.startswith("--server=")) for s in specs[2:]]
    assert servers == ["--server=10.0.0.1:8000", "--server=10.0.0.2:8001",
                       "--server=10.0.0.1:8000"]
    one = commands.child_specs(str(tmp_path), [GIN], [], actors=1, workers=workers[:1])
    assert not any(a.startswith("--tf_config") or "multi_worker" in a for a in one[0].argv)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_launch_with_two_learner_workers_trains_them_in_step_to_the_end(tmp_path):
    """Two learner workers on 127.0.0.1 (one MultiWorkerMirroredStrategy), each fed by
    its own actor: both end at the same iteration, the chief alone writes the run."""
    root = tmp_path / "run"
    proc = _launch(tmp_path, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--learner_workers=2", "--warm_spares=false",
                   "--gin_param=train.num_iterations=6", "--gin_param=train.num_env_steps=None",
                   "--gin_param=train.stop_at_return=None",
                   "--gin_param=train.checkpoint_interval=3")
    try:
        assert proc.wait(timeout=500) == 0, open(tmp_path / "launch.log").read()[-3000:]
    finally:
        _kill(proc, set())
    chief = open(tmp_path / "launch.log").read()
    other = open(root / "logs" / "learner_1.log").read()
    done = [re.search(r"Training done: \{'iteration': (\d+), 'env_steps': (\d+)", log).groups()
            for log in (chief, other)]
    assert done[0] == done[1] and done[0][0] == "6", done  # in step: the same counts
    assert "learner 1 exited" not in chief  # never restarted
    assert 'model_checkpoint_path: "ckpt-6"' in open(root / "checkpoints" / "checkpoint").read()
    assert len(os.listdir(root / "train")) == 1  # one event file: the chief's


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_learner_worker_killed_restarts_both_workers_from_the_chiefs_checkpoint(tmp_path):
    """--learner_workers=2, worker 1 SIGKILLed after the chief's first checkpoint: the
    chief (waiting in its all-reduce) goes too, both start again from the chief's
    checkpoint, one console line, and both end in step at the budget."""
    root = tmp_path / "run"
    proc = _launch(tmp_path, f"--root_dir={root}", f"--gin_file={GIN}", "--actors=2",
                   "--learner_workers=2", "--warm_spares=false",
                   "--gin_param=train.num_iterations=30", "--gin_param=train.num_env_steps=None",
                   "--gin_param=train.stop_at_return=None",
                   "--gin_param=train.checkpoint_interval=3")
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(root / "checkpoints" / "checkpoint"):
            assert time.monotonic() < deadline and proc.poll() is None, \
                open(tmp_path / "launch.log").read()[-3000:]
            time.sleep(0.2)
        [worker] = [pid for pid in _descendants(proc.pid) if _is_learner(pid) and
                    '"index": 1' in open(f"/proc/{pid}/cmdline").read()]
        os.kill(worker, signal.SIGKILL)
        assert proc.wait(timeout=500) == 0, open(tmp_path / "launch.log").read()[-3000:]
    finally:
        _kill(proc, set())
    chief = open(tmp_path / "launch.log").read()
    assert chief.count("launch: learner 1 exited with signal SIGKILL; restarting all 2 "
                       "learner workers together from the chief's checkpoint") == 1
    assert chief.count("restarting all") == 1  # the chief's own end is the gang's
    resumed = re.findall(r"Resumed from .*ckpt-(\d+) at iteration (\d+)", chief)
    other = open(root / "logs" / "learner_1.log").read()
    assert len(resumed) == 1 and resumed == re.findall(
        r"Resumed from .*ckpt-(\d+) at iteration (\d+)", other)  # the chief's, both
    done = [re.search(r"Training done: \{'iteration': (\d+), 'env_steps': (\d+)", log).groups()
            for log in (chief, other)]
    assert done[0] == done[1] and done[0][0] == "30", done  # no iteration counted twice
    assert json.load(open(root / "result.json"))["iteration"] == 30


def test_a_launch_without_reverb_names_the_extra_before_starting_anything(tmp_path):
    """Its children serve and read unrolls through Reverb ([replay]): checked first,
    one line, exit 2, no learner or spare started, no root_dir left."""
    code = ("import importlib.util as u, sys; real = u.find_spec; "
            "u.find_spec = lambda name, *a: None if name == 'reverb' else real(name, *a); "
            "sys.argv[0] = 'launch'; "
            "from alf_async import config, launch; config.run_command(launch.main)")
    result = subprocess.run([sys.executable, "-c", code, f"--root_dir={tmp_path / 'run'}",
                             f"--gin_file={GIN}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("E")]
    assert len(errors) == 1 and errors[0].endswith(
        "Missing package: python -m alf_async.launch (the learner serves its actors through "
        "Reverb) needs the [replay] extra: pip install '.[replay]'"), result.stderr
    assert "learner" not in result.stderr.lower().split("missing package")[0]
    assert not (tmp_path / "run").exists()


def _ray_temp_folders():
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("alf_ray_")
            and not name.startswith("alf_ray_cluster_")}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum,when", [(signal.SIGINT, "ray_starting"),
                                         (signal.SIGKILL, "training")])
@pytest.mark.alone
def test_a_ray_launch_leaves_no_process_and_no_temp_folder_5_s_after_its_end(
        tmp_path, signum, when):
    """Ray's agents outlived a launch by 60-70 s (parent 1) after a Ctrl-C during
    Ray's start or a SIGKILL, and its temp folder stayed: now all gone within 5 s."""
    before = _ray_temp_folders()
    proc = _launch(tmp_path, f"--root_dir={tmp_path / 'run'}",
                   "--gin_file=gin_configs/ppo_chaos.gin", "--backend=ray", "--actors=2",
                   "--gin_param=train.stop_at_return=None")
    seen = set()
    try:
        deadline = time.monotonic() + 240
        while True:  # note every process of the launch, the short-lived ones too
            seen |= _descendants(proc.pid)
            names = " ".join(open(f"/proc/{pid}/cmdline").read() for pid in seen
                             if os.path.exists(f"/proc/{pid}/cmdline"))
            ready = ("ray::DashboardAgent" in names if when == "ray_starting"
                     else "alf_async.actor" in names)
            if ready:
                break
            assert proc.poll() is None and time.monotonic() < deadline, names
            time.sleep(0.1)
        if when == "training":
            _wait_for_line(tmp_path / "launch.log", r"iteration \d+ \| env steps", proc, 240)
            seen |= _descendants(proc.pid)
        proc.send_signal(signum)
        proc.wait(timeout=30)
        end = time.monotonic()
        while (set(_processes()) & seen or _ray_temp_folders() - before) \
                and time.monotonic() - end < 5:
            time.sleep(0.1)
        left = {pid: open(f"/proc/{pid}/cmdline").read()[:60]
                for pid in set(_processes()) & seen if os.path.exists(f"/proc/{pid}/cmdline")}
        assert not left, f"outlived the launch by 5 s: {left}"
        assert not _ray_temp_folders() - before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in set(_processes()) & seen:
            os.kill(pid, signal.SIGKILL)


def test_the_start_up_line_says_the_learner_listens_on_every_interface():
    """Reverb binds *:PORT: the line must not claim loopback (`ss -ltnp` shows *:PORT).
    In a process of its own: the launch's flags beside no other command's."""
    code = ("from alf_async.launch import servers_text; "
            "from alf_async.supervision.commands import LearnerWorker; "
            "print(servers_text([LearnerWorker('127.0.0.1', 49837, 0)]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == (
        "127.0.0.1:49837 (actors dial it there; its Reverb server listens on that port of "
        "every interface)")
