"""The chaos ledger: what a run and the faults injected into it came to, from its events.

Every figure is read from the run's typed events (`events.read_events`), its
checkpoints and /proc: restarts per process, env rebuilds, env steps and
seconds lost to learner restarts, when the target was reached, processes
left behind, unreadable checkpoints, unrolls delivered twice, the longest
stop. The experiment command reads the ledgers back (`experiments.ledgers`).
"""

import os
import time
from typing import Dict, List, Optional

from absl import logging

from alf_async import events
from alf_async.chaos.faults import LaunchTree, count_kinds

STOP_BOUND_SECS = 5.0  # a stop that takes longer is a hang


def restarts_by_child(read: List[dict]) -> Dict[str, int]:
    """{child: restarts} of the launch's `restarted` events."""
    counts: Dict[str, int] = {}
    for event in read:
        if event["event"] == "restarted":
            counts[event["child"]] = counts.get(event["child"], 0) + 1
    return counts


def lost_to_learner_restarts(read: List[dict]) -> Dict[str, float]:
    """Env steps trained again and seconds without training, over the learner's restarts.

    A restart is a `resumed` event at iteration N: the env steps between
    iteration N and the last `progress` before it were trained again; the
    seconds from that progress to the next one had none.
    """
    steps_lost = seconds_lost = 0.0
    last_progress = None  # the last progress event
    pending = None  # the time of the last progress, awaiting the next progress
    for event in read:
        if event["event"] == "progress":
            if pending is not None:
                seconds_lost += event["time"] - pending
                pending = None
            last_progress = event
        elif event["event"] == "resumed" and last_progress is not None:
            per_iteration = last_progress["env_steps"] / max(last_progress["iteration"], 1)
            steps_lost += max(last_progress["iteration"] - event["iteration"], 0) * per_iteration
            pending = last_progress["time"]
    return dict(env_steps_lost=steps_lost, seconds_lost=round(seconds_lost, 1))


def reached(read: List[dict], target: float, started: float) -> Optional[dict]:
    """Where the run first reached `target` (a `reached_target` event): the trainer's
    env steps and the wall seconds from `started` (a `time.time()`), or None."""
    for event in read:
        if event["event"] == "reached_target" and event["average_return"] >= target:
            return dict(env_steps=event["env_steps"],
                        wall_seconds=round(event["time"] - started, 1))
    return None


def env_restarts(read: List[dict], cause: str = "") -> int:
    """The env rebuilds the run's processes made (those after a `cause` error)."""
    return sum(event["event"] == "env_exception_survived" and cause in event["error"]
               for event in read)


def unreadable_checkpoints(root_dir: str) -> int:
    """The run's checkpoints that cannot be read back."""
    from alf_async.training import checkpoints  # pylint: disable=import-outside-toplevel  # TF
    directory = os.path.join(root_dir, "checkpoints")
    return sum(checkpoints.unreadable(prefix) is not None
               for prefix in checkpoints.saved_checkpoints(directory))


def busy_cpu_seconds() -> float:
    """CPU seconds this machine's cores have been busy since it booted (Linux's
    `/proc/stat`: all but idle and I/O wait; 0.0 elsewhere). Machine-wide: the
    ledger's `cpu_seconds` counts everything that ran beside the run too."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def ledger(run: dict, tree: LaunchTree, root_dir: str, target: float) -> dict:
    """What the run and its faults came to, from its events.

    Args:
        run: what the chaos command gathered: `seed`, `backend`, `kinds` (the
            fault kinds asked for), `injected` ({kind: faults fired}), `plan`
            (the `(when, kind)` never fired), `scheduled` ({kind: faults} of a
            run of rounds, else {}), `stop_seconds` (each stop the injector
            timed), `final_stop` (seconds the final stop took; 0: the run
            ended by itself), `exit_status`, `started` (a `time.time()`) and
            `cpu_seconds`.
        tree: the run's processes.
        root_dir: the run's folder (its events and checkpoints).
        target: the average return it had to reach.
    """
    read = events.read_events(root_dir)
    injected = dict(run["injected"])
    if "env_exception" in run["kinds"]:
        injected["env_exception"] = env_restarts(read, "InjectedEnvFault")
    stops = run["stop_seconds"] + ([run["final_stop"]] if run["final_stop"] else [])
    unfired = count_kinds(run["plan"]) if run["scheduled"] else {}
    if unfired:
        logging.warning("chaos: the run ended before %d scheduled fault(s) fired: %s",
                        sum(unfired.values()), unfired)
    return dict(
        seed=run["seed"], backend=run["backend"], faults=injected,
        scheduled=run["scheduled"], unfired=unfired,
        restarts=restarts_by_child(read), env_restarts=env_restarts(read),
        **lost_to_learner_restarts(read),
        reached=reached(read, target, run["started"]),
        exit_status=run["exit_status"],
        wall_seconds=round(time.time() - run["started"], 1),
        cpu_seconds=round(run["cpu_seconds"], 1), cores=os.cpu_count(),
        timed_out=bool(run["final_stop"]), processes_left=len(tree.left_behind()),
        unreadable_checkpoints=unreadable_checkpoints(root_dir),
        duplicated_unrolls=sum(e["event"] == "unroll_duplicated" for e in read),
        longest_stop_secs=round(max(stops, default=0.0), 2),
        hangs=sum(seconds > STOP_BOUND_SECS for seconds in stops))


def clean(entry: dict) -> bool:
    """Whether a ledger shows a run that reached its target and left nothing wrong."""
    return (entry["reached"] is not None and entry["processes_left"] == 0 and
            entry["unreadable_checkpoints"] == 0 and entry["duplicated_unrolls"] == 0 and
            entry["hangs"] == 0 and entry["exit_status"] == 0)
