"""The launch's backends side by side: start time, restart times and memory.

    python tools/backend_restarts.py --configs=local,local:actor_spares=0 --repeats=3

For each config (a backend, then launch flags: `ray:warm_spares=false`,
`local:actor_spares=0:learner_spares=2`), runs `python -m alf_async.launch`
(`ppo_chaos.gin`, 2 actor processes; `ray` with a Ray of its own on this host)
and measures, per repeat:

- `start_s`: from the command to the learner's first progress line;
- `memory_mib`: the resident memory of every process below the launch (the
  commands, their spares, and for Ray its GCS, raylet, workers and agents) 5 s
  into training; `ray_mib`: Ray's own share of it;
- `learner_restart_s`: from a SIGKILL of the learner (after its first
  checkpoint) to a progress line of its successor (it resumed and trains);
- `actor_restart_s`: from a SIGKILL of actor 0 to its successor's first
  weights (`weights of update N` in its log): it collects again.

Prints one JSON line per run, then the medians per config and their ratios to
the first config's. Training keeps both cores busy, so the restarts happen on
a busy machine; the machine's load changes every figure: run the configs in
one invocation, nothing else beside it.
"""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

from absl import app, flags

from alf_async.chaos.faults import LaunchTree, proc_table

FLAGS = flags.FLAGS
WAIT_SECS = 240.0  # any one wait, at most


def _define_flags() -> None:
    """The tool's flags (defined when run, not when imported: the tests import it
    beside other tools)."""
    flags.DEFINE_list("configs", ["local", "ray"], "The launch's --backend values to "
                      "compare, each followed by launch flags ':FLAG=VALUE'.")
    flags.DEFINE_integer("repeats", 1, "Runs per config (alternating configs).")

_PROGRESS = r"iteration \d+ \| env steps"


def _wait(read, pattern: str, start: int, proc) -> float:
    """Waits for `pattern` in `read()[start:]`; returns when it showed."""
    deadline = time.monotonic() + WAIT_SECS
    while not re.search(pattern, read()[start:]):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {pattern!r}: {read()[-2000:]}")
        time.sleep(0.05)
    return time.monotonic()


def _reader(path: str):
    def read() -> str:
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""
    return read


def _rss_mib(pids) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                total += int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1))
        except (FileNotFoundError, AttributeError):
            pass
    return total / 1024


def _memory(launch_pid: int) -> Dict[str, float]:
    table = proc_table()
    below, grew = {launch_pid}, True
    while grew:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in below} - below
        below, grew = below | more, bool(more)
    ray = [pid for pid in below if "alf_async" not in table[pid][2]
           and "alf-spare" not in table[pid][2]]
    return dict(memory_mib=round(_rss_mib(below), 1), ray_mib=round(_rss_mib(ray), 1))


def measure(config: str, root: str) -> Dict[str, float]:
    """One run of the launch with `config` in `root`, with its two faults."""
    log = os.path.join(root, "launch.log")
    backend, *settings = config.split(":")
    command = [sys.executable, "-m", "alf_async.launch", f"--backend={backend}",
               *[f"--{setting}" for setting in settings], f"--root_dir={root}", "--actors=2", "--gin_file=gin_configs/ppo_chaos.gin",
               "--gin_param=train.stop_at_return=None",
               "--gin_param=train.num_env_steps=100000000"]
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    read, tree = _reader(log), LaunchTree(proc.pid)
    try:
        figures = dict(start_s=round(_wait(read, _PROGRESS, 0, proc) - start, 1))
        time.sleep(5.0)
        figures.update(_memory(proc.pid))
        _wait(_reader(os.path.join(root, "checkpoints", "checkpoint")), "ckpt", 0, proc)
        figures["learner_restart_s"] = _restart(proc, read, tree.learner(), _PROGRESS)
        actor_log = _reader(os.path.join(root, "logs", "actor_0.log"))
        actor = next(pid for pid in tree.actors() if "--task=0" in proc_table()[pid][2])
        figures["actor_restart_s"] = _restart(proc, actor_log, actor, r"weights of update \d+")
        return figures
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _restart(proc, read, pid: int, pattern: str) -> float:
    """SIGKILLs `pid`; seconds until `pattern` shows in `read()` after the kill."""
    mark = len(read())
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    return round(_wait(read, pattern, mark, proc) - killed, 1)


def main(argv) -> None:
    del argv
    runs: Dict[str, List[Dict[str, float]]] = {config: [] for config in FLAGS.configs}
    for repeat in range(FLAGS.repeats):
        for config in FLAGS.configs:
            with tempfile.TemporaryDirectory() as root:
                figures = measure(config, root)
            runs[config].append(figures)
            print(json.dumps(dict(config=config, repeat=repeat, **figures)), flush=True)
    medians = {config: {key: statistics.median(run[key] for run in done)
                        for key in done[0]} for config, done in runs.items()}
    first = FLAGS.configs[0]
    for config, figures in medians.items():
        print(f"median {config}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
        if config != first:
            print(f"  {config} / {first}: " + ", ".join(
                f"{key} {figures[key] / medians[first][key]:.2f}x"
                for key in figures if medians[first][key]))


if __name__ == "__main__":
    _define_flags()
    app.run(main)
