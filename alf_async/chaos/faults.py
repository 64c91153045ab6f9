"""Faults injected into a supervised run from outside, and the run's processes found in /proc.

`python -m alf_async.chaos` draws a `schedule` of fault kinds and
has an `Injector` fire each at its point: SIGKILL or SIGTERM to a process
of the `LaunchTree` (an env worker, an actor, the learner), blocked
checkpoint writes, a lost node of a simulated Ray cluster. The injector
knows the run through its typed events (`events.EventReader`) and its
`run_settings.json`, never its log lines.

Thread-safety: one caller (the chaos command's loop).
"""

import dataclasses
import os
import random
import signal
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging

from alf_async import events
from alf_async.supervision import reaper
from alf_async.supervision.spare import SPARE_NAME, waiting
from alf_async.runs import layout, records

KINDS = ("env_exception", "env_worker_kill", "actor_kill", "learner_kill", "learner_term",
         "checkpoint_write")
RAY_KINDS = ("node_loss",)  # only where the run has nodes
OUTSIDE = KINDS[1:] + RAY_KINDS  # injected by this tool; env_exception is drawn in the envs


def parse_kinds(text: str, backend: str = "local") -> List[str]:
    """The fault kinds of `--faults` ('all': every kind of `backend`); raises
    ValueError naming an unknown one, or one the backend cannot have."""
    known = KINDS + RAY_KINDS if backend == "ray" else KINDS
    if text.strip() in ("", "none"):
        return []
    if text.strip() == "all":
        return list(known)
    kinds = [kind.strip() for kind in text.split(",")]
    for kind in kinds:
        if kind not in known:
            needs = " (needs --backend=ray)" if kind in RAY_KINDS else ""
            raise ValueError(f"--faults: unknown fault kind {kind!r}{needs} (known: "
                             f"{', '.join(known)}, all or none)")
    return kinds


def schedule(kinds: Sequence[str], mean_interval: float, horizon: float,
             seed: int, rounds: int = 0) -> List[tuple]:
    """`(when, kind)` of the outside faults, in order: `when` in seconds after training
    started, or in env steps.

    Every kind comes once per round (`rounds` of them; 0: until the
    horizon), in a seeded order; the gaps are exponential with mean
    `mean_interval`.
    """
    rng = random.Random(seed)
    outside = [kind for kind in kinds if kind in OUTSIDE]
    plan, now = [], 0.0
    while outside and (not rounds or len(plan) < rounds * len(outside)):
        order = list(outside)
        rng.shuffle(order)
        for kind in order:
            now += rng.expovariate(1.0 / mean_interval)
            if now > horizon:
                return plan
            plan.append((now, kind))
    return plan


def count_kinds(plan) -> Dict[str, int]:
    """`{kind: faults}` of a plan of `(when, kind)`."""
    counts: Dict[str, int] = {}
    for _, kind in plan:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def proc_table() -> Dict[int, tuple]:
    """{pid: (ppid, session, cmdline)} of the live, non-zombie processes; a warm
    spare that waits (`spare.waiting`) has the cmdline `SPARE_NAME`."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                name, fields = stat.read().split("(", 1)[1].rsplit(")", 1)
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        fields = fields.split()
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[3]),
                                 SPARE_NAME if waiting(argv, name) else " ".join(argv).strip())
    return table


_COMMANDS = ("alf_async.train", "alf_async.actor", SPARE_NAME)


class LaunchTree:
    """The run's processes below `root_pid` (the launch, or this tool with its Ray
    cluster): the learner, the actors (the commands whose parent is not one, a
    launch's child or a Ray host's) and the actors' env workers."""

    def __init__(self, root_pid: int):
        self._pid = root_pid
        self.sessions = set()  # every session a command of the run ever had
        self.descendants = set()  # every process below root_pid ever seen

    def _below(self, table) -> set:
        below, grew = {self._pid}, True
        while grew:
            more = {pid for pid, (ppid, _, _) in table.items() if ppid in below} - below
            below |= more
            grew = bool(more)
        below.discard(self._pid)
        self.descendants |= below
        return below

    def _children(self, table) -> Dict[int, str]:
        commands = {pid: table[pid][2] for pid in self._below(table)
                    if any(name in table[pid][2] for name in _COMMANDS)}
        children = {pid: cmd for pid, cmd in commands.items() if table[pid][0] not in commands}
        self.sessions.update(table[pid][1] for pid in children)
        return children

    def learner(self) -> Optional[int]:
        table = proc_table()
        return next((pid for pid, cmd in self._children(table).items()
                     if "alf_async.train" in cmd), None)

    def actors(self, below: Optional[int] = None) -> List[int]:
        """The actor processes (only those descending from process `below`, if given)."""
        table = proc_table()
        actors = [pid for pid, cmd in self._children(table).items() if "alf_async.actor" in cmd]
        return actors if below is None else [
            pid for pid in actors if below in _ancestors(pid, table)]

    def env_workers(self) -> List[int]:
        """Forks of an actor process (same command line): its env workers."""
        table = proc_table()
        actors = {pid: cmd for pid, cmd in self._children(table).items()
                  if "alf_async.actor" in cmd}
        return [pid for pid, (ppid, _, cmd) in table.items()
                if ppid in actors and cmd == actors[ppid]]

    def left_behind(self) -> List[int]:
        """Processes of the run's sessions, or ever below `root_pid`, still alive (but a
        parent's watcher, `reaper`, that ends just after it)."""
        return [pid for pid, (_, sid, cmd) in proc_table().items()
                if (sid in self.sessions or pid in self.descendants)
                and reaper.WATCHER_MODULE not in cmd.split()]


@dataclasses.dataclass
class Injector:
    """Injects one outside fault into a `LaunchTree`; returns whether it found a target."""
    tree: LaunchTree
    root_dir: str
    rng: random.Random
    read: events.EventReader
    stop_seconds: List[float] = dataclasses.field(default_factory=list)
    _blockers: List[str] = dataclasses.field(default_factory=list)
    _blocked_at: float = 0.0  # when the checkpoint writes were blocked
    _learner_mark: float = 0.0  # when the last learner fault came
    last_target: str = "checkpoints"  # what the last fault hit (a process's pid)
    cluster: Optional[object] = None  # a `ray_cluster.SimulatedCluster` (--backend=ray)

    def inject(self, kind: str) -> bool:
        return getattr(self, "_" + kind)()

    def _kill(self, pids: List[int], signum: int) -> bool:
        if not pids:
            return False
        pid = self.rng.choice(sorted(pids))
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        self.last_target = f"pid {pid}"
        return True

    def _env_worker_kill(self) -> bool:
        return self._kill(self.tree.env_workers(), signal.SIGKILL)

    def _actor_kill(self) -> bool:
        return self._kill(self.tree.actors(), signal.SIGKILL)

    def _training_learner(self) -> Optional[int]:
        """The learner's pid once it trains (a `progress` event since the last learner
        fault): a learner fault waits for that, so that the run can progress
        between faults."""
        if not self.read("progress", since=self._learner_mark):
            return None
        return self.tree.learner()

    def _signal_learner(self, signum: int) -> bool:
        learner = self._training_learner()
        if not learner or not self._kill([learner], signum):
            return False
        self._learner_mark = time.time()
        return True

    def _learner_kill(self) -> bool:
        return self._signal_learner(signal.SIGKILL)

    def _learner_term(self) -> bool:
        learner = self._training_learner()
        if not self._signal_learner(signal.SIGTERM):
            return False
        start = time.monotonic()
        while os.path.exists(f"/proc/{learner}") and _state(learner) != "Z" and \
                time.monotonic() - start < 30:
            time.sleep(0.05)
        self.stop_seconds.append(time.monotonic() - start)
        return True

    def _checkpoint_write(self) -> bool:
        """Blocks the next two checkpoints the learner will write (by iteration)."""
        interval = _checkpoint_interval(self.root_dir)
        directory = os.path.join(self.root_dir, layout.CHECKPOINT_DIR)
        if interval is None or not os.path.isdir(directory):
            return False
        numbers = [number for number in map(layout.checkpoint_number, os.listdir(directory))
                   if number is not None]  # a blocker (a folder) counts too
        latest = max(numbers, default=0)
        first = (latest // interval + 1) * interval
        for number in (first, first + interval):
            path = os.path.join(directory, layout.checkpoint_name(number) + ".index")
            if not os.path.exists(path):
                os.makedirs(path)
                self._blockers.append(path)
        self._blocked_at = time.time()
        return True

    def _node_loss(self) -> bool:
        """Removes the actor node that holds the most actors (of equals, a seeded
        choice) and adds another: Ray moves their hosts."""
        if self.cluster is None or not self.tree.actors():
            return False
        held = [len(self.tree.actors(below=pid)) for pid in self.cluster.actor_node_pids()]
        index = self.rng.choice([i for i, count in enumerate(held) if count == max(held)])
        old, new = self.cluster.replace_actor_node(index)
        self.last_target = f"node {old[:12]} with {held[index]} actor(s) (now {new[:12]})"
        return True

    def clear_blockers(self, force: bool = False) -> None:
        """Removes the checkpoint blockers once a write failed on one (a
        `checkpoint_failed` event; or when forced)."""
        if self._blockers and (force or self.read("checkpoint_failed", since=self._blocked_at)):
            for path in self._blockers:
                os.rmdir(path)
            self._blockers = []


def _ancestors(pid: int, table: Dict[int, tuple]) -> set:
    found = set()
    while pid in table and pid not in found:
        found.add(pid)
        pid = table[pid][0]
    return found


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "X"


def _checkpoint_interval(root_dir: str) -> Optional[int]:
    """The run's checkpoint interval, as its `run_settings.json` records it."""
    recorded = records.read_records(root_dir)
    return recorded and recorded.run.checkpoint_interval


def inject_until_done(proc, injector: Injector, plan, deadline: float,
                       progress: Callable[[], float]) -> Dict[str, int]:
    """Injects `plan` while the launch runs; returns the faults injected, by kind.
    What is left in `plan` was scheduled but never fired (the run ended first)."""
    injected = {}
    while proc.poll() is None and time.monotonic() < deadline:
        injector.clear_blockers()
        now = progress() if plan else 0.0
        if plan and now >= plan[0][0]:
            _, kind = plan.pop(0)
            injector.last_target = "checkpoints"
            if injector.inject(kind):
                injected[kind] = injected.get(kind, 0) + 1
                logging.info("chaos: %s at %.1f", kind, now)
                events.emit("fault_injected", kind=kind, target=injector.last_target)
            else:  # no target yet: at the next bit of progress
                plan.insert(0, (now + 1, kind))  # one second or one env step later
        time.sleep(0.1)
    injector.clear_blockers(force=True)
    return injected
