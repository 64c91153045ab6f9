"""A seeded fault injector around a supervised run, ending with a ledger.

    python -m alf_async.supervision.chaos --gin_file=gin_configs/ppo_chaos.gin --root_dir=runs/chaos/1 \\
        --seed=1 --actors=2

runs `python -m alf_async.launch` (a learner and `--actors` actor processes)
and, once the learner trains, injects the faults of `--faults` at points drawn
from a schedule seeded by `--seed` (exponential gaps of mean
`--mean_interval_secs`, or of `--mean_interval_env_steps` of training
progress, every kind in turn):

- env_exception: inside the envs, with probability `--env_fault_p` per step
  (`create_environment.step_fault_probability`, rebuilt by the env threads);
- env_worker_kill, actor_kill, learner_kill: SIGKILL of an env worker
  process, an actor process, the learner;
- learner_term: SIGTERM of the learner (it checkpoints and exits 143);
- checkpoint_write: the learner's next checkpoint writes fail (a directory
  stands where their index files go) until its error line shows;
- node_loss (`--backend=ray` only): the actor node that holds the most
  actor processes is removed and a fresh one added.

With `--backend=ray` the tool starts a Ray cluster of simulated nodes on
this host (`ray_cluster.SimulatedCluster`: a head, the learner's node and
`--actor_nodes` nodes for the actors, which Ray spreads over them) and the
launch joins it.

`--faults=none` runs the same command without faults (the baseline). The
ledger (printed, and written to `--ledger`, default ROOT_DIR/ledger.json)
counts the faults, restarts, env steps and seconds lost, when the target was
reached, processes left behind, unreadable checkpoints, unrolls delivered
twice, and the longest stop. It reads the run through its typed events
(`alf_async.events`, `RunEvents`), never its log lines; the launch's output is
kept in ROOT_DIR/launch.log for people. Bad input: one line, exit 2.
"""

import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import app, flags, logging

from alf_async import events
from alf_async.supervision.spare import SPARE_NAME, waiting
from alf_async.training import files

KINDS = ("env_exception", "env_worker_kill", "actor_kill", "learner_kill", "learner_term",
         "checkpoint_write")
RAY_KINDS = ("node_loss",)  # only where the run has nodes
OUTSIDE = KINDS[1:] + RAY_KINDS  # injected by this tool; env_exception is drawn in the envs

FLAGS = flags.FLAGS


def _define_flags() -> None:
    """The command's flags (defined when run, not when imported: the tests import it
    next to other tools that define --gin_file too)."""
    flags.DEFINE_multi_string("gin_file", ["gin_configs/ppo_chaos.gin"],
                              "The run's gin files.")
    flags.DEFINE_multi_string("gin_param", [], "The run's gin bindings.")
    flags.DEFINE_string("root_dir", None, "The run's root_dir.")
    flags.DEFINE_integer("actors", 2, "K, actor processes.")
    flags.DEFINE_integer("seed", 0, "Seeds the schedule and the run (train.seed).")
    flags.DEFINE_string("faults", "all", "Comma-separated fault kinds, 'all' or 'none'.")
    flags.DEFINE_float("env_fault_p", 0.0005, "env_exception's probability per env step.")
    flags.DEFINE_float("mean_interval_secs", 15.0, "Mean seconds between injected faults.")
    flags.DEFINE_integer("mean_interval_env_steps", 0, "Mean env steps of training progress "
                         "(the most any learner logged) between injected faults, instead of "
                         "--mean_interval_secs (0): the same schedule however fast the run.")
    flags.DEFINE_integer("rounds", 0, "Rounds of faults (each kind once per round); 0: until "
                         "the run ends.")
    flags.DEFINE_float("timeout_secs", 1800.0, "The run is stopped (and fails) after this.")
    flags.DEFINE_integer("max_restarts", 100, "The launch's --max_restarts (per process).")
    flags.DEFINE_bool("warm_spares", True, "The launch's --warm_spares.")
    flags.DEFINE_integer("learner_spares", 2, "The launch's --learner_spares: two, since "
                         "learner faults here come sooner than one spare gets ready.")
    flags.DEFINE_float("target", 475.0, "The average return the run must reach.")
    flags.DEFINE_string("ledger", None, "Where to write the ledger (ROOT_DIR/ledger.json).")
    flags.DEFINE_enum("backend", "local", ["local", "ray"], "The launch's --backend; with "
                      "ray, on a cluster of simulated nodes that this tool starts.")
    flags.DEFINE_integer("actor_nodes", 2, "--backend=ray: the simulated nodes that hold the "
                         "actors (node_loss removes the one with the most actors).")
    flags.mark_flag_as_required("root_dir")


_STOP_BOUND_SECS = 5.0  # a stop that takes longer is a hang


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


# --- the launch's processes, from /proc -------------------------------------------------

def _proc_table() -> Dict[int, tuple]:
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
        table = _proc_table()
        return next((pid for pid, cmd in self._children(table).items()
                     if "alf_async.train" in cmd), None)

    def actors(self, below: Optional[int] = None) -> List[int]:
        """The actor processes (only those descending from process `below`, if given)."""
        table = _proc_table()
        actors = [pid for pid, cmd in self._children(table).items() if "alf_async.actor" in cmd]
        return actors if below is None else [
            pid for pid in actors if below in _ancestors(pid, table)]

    def env_workers(self) -> List[int]:
        """Forks of an actor process (same command line): its env workers."""
        table = _proc_table()
        actors = {pid: cmd for pid, cmd in self._children(table).items()
                  if "alf_async.actor" in cmd}
        return [pid for pid, (ppid, _, cmd) in table.items()
                if ppid in actors and cmd == actors[ppid]]

    def left_behind(self) -> List[int]:
        """Processes of the run's sessions, or ever below `root_pid`, still alive."""
        return [pid for pid, (_, sid, _) in _proc_table().items()
                if sid in self.sessions or pid in self.descendants]


# --- the run's events -------------------------------------------------------------------

class RunEvents:
    """The run's typed events (`alf_async.events`), read again only where a file grew:
    what this tool knows of the run, instead of its log lines."""

    def __init__(self, root_dir: str):
        self._dir = os.path.join(root_dir, events.DIRECTORY)
        self._files: Dict[str, tuple] = {}  # name: (size, its events)

    def __call__(self, event: Optional[str] = None, since: float = 0.0) -> List[dict]:
        """The events (of kind `event`, after time `since`), in time order."""
        names = sorted(os.listdir(self._dir)) if os.path.isdir(self._dir) else []
        for name in names:
            path = os.path.join(self._dir, name)
            if not name.endswith(".jsonl") or not os.path.exists(path):
                continue
            size = os.path.getsize(path)
            if self._files.get(name, (None,))[0] != size:
                self._files[name] = (size, _parse(_read(path)))
        found = [e for _, read in self._files.values() for e in read
                 if (event is None or e["event"] == event) and e["time"] > since]
        return sorted(found, key=lambda e: e["time"])


def _parse(text: str) -> List[dict]:
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by a crash
    return found


# --- injecting --------------------------------------------------------------------------

@dataclasses.dataclass
class Injector:
    """Injects one outside fault into a `LaunchTree`; returns whether it found a target."""
    tree: LaunchTree
    root_dir: str
    rng: random.Random
    read: RunEvents
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
        directory = os.path.join(self.root_dir, "checkpoints")
        if interval is None or not os.path.isdir(directory):
            return False
        numbers = [int(m.group(1)) for m in (re.fullmatch(r"ckpt-(\d+)\.index", name)
                                             for name in os.listdir(directory)) if m]
        latest = max(numbers, default=0)
        first = (latest // interval + 1) * interval
        for number in (first, first + interval):
            path = os.path.join(directory, f"ckpt-{number}.index")
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


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _checkpoint_interval(root_dir: str) -> Optional[int]:
    """The run's checkpoint interval, as its `run_settings.json` records it."""
    settings = files.read_settings(root_dir)
    return settings and settings["run"]["checkpoint_interval"]


# --- the ledger -------------------------------------------------------------------------

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
    from alf_async.training import checkpoints
    directory = os.path.join(root_dir, "checkpoints")
    return sum(checkpoints.unreadable(prefix) is not None
               for prefix in checkpoints.saved_checkpoints(directory))


# --- the run ----------------------------------------------------------------------------

def _launch_command(kinds: Sequence[str], cluster=None) -> List[str]:
    params = [f"train.seed={FLAGS.seed}", *FLAGS.gin_param]
    if "env_exception" in kinds:
        params += [f"create_environment.step_fault_probability={FLAGS.env_fault_p}",
                   "LocalCollection.restart_failed_envs=True"]
    return [sys.executable, "-m", "alf_async.launch", f"--root_dir={FLAGS.root_dir}",
            f"--actors={FLAGS.actors}", f"--max_restarts={FLAGS.max_restarts}",
            f"--warm_spares={FLAGS.warm_spares}", f"--learner_spares={FLAGS.learner_spares}",
            *(cluster.launch_flags() if cluster else []),
            *[f"--gin_file={path}" for path in FLAGS.gin_file],
            *[f"--gin_param={param}" for param in params]]


def _wait_for_training(proc, read: RunEvents, deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        if read("progress"):
            return True
        time.sleep(0.2)
    return False


def progress_env_steps(read: List[dict]) -> int:
    """The most env steps any learner of the run reported (a resumed one repeats some)."""
    return max((e["env_steps"] for e in read if e["event"] == "progress"), default=0)


def _progress(read: RunEvents) -> Callable[[], float]:
    """Where the run is on the schedule's axis: env steps or seconds from now."""
    if FLAGS.mean_interval_env_steps:
        return lambda: progress_env_steps(read("progress"))
    start = time.monotonic()
    return lambda: time.monotonic() - start


def _count_kinds(plan) -> Dict[str, int]:
    """`{kind: faults}` of a plan of `(when, kind)`."""
    counts: Dict[str, int] = {}
    for _, kind in plan:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _inject_until_done(proc, injector: Injector, plan, deadline: float,
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


def _stop(proc) -> float:
    """SIGTERM to a launch still running; returns how long it took to exit."""
    if proc.poll() is not None:
        return 0.0
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    return time.monotonic() - start


def _interrupt(signum, frame):
    del signum, frame
    raise KeyboardInterrupt


def _start_cluster():
    """The simulated Ray cluster of `--backend=ray` (None: the local backend)."""
    if FLAGS.backend != "ray":
        return None
    from alf_async.supervision import ray_cluster  # pylint: disable=import-outside-toplevel
    return ray_cluster.SimulatedCluster(FLAGS.actors, actor_nodes=FLAGS.actor_nodes)


def _inject(proc, injector: Injector, kinds: Sequence[str], deadline: float) -> tuple:
    """Once the learner trains, the schedule's faults; returns (injected, plan left,
    scheduled)."""
    if not _wait_for_training(proc, injector.read, deadline):
        return {}, [], {}
    injector.tree.learner()  # note the sessions
    by_steps = FLAGS.mean_interval_env_steps > 0
    plan = schedule(kinds, FLAGS.mean_interval_env_steps if by_steps
                    else FLAGS.mean_interval_secs,
                    float("inf") if by_steps else FLAGS.timeout_secs, FLAGS.seed,
                    FLAGS.rounds)
    scheduled = _count_kinds(plan) if FLAGS.rounds else {}  # else: open-ended
    injected = _inject_until_done(proc, injector, plan, deadline, _progress(injector.read))
    return injected, plan, scheduled


def run(kinds: List[str]) -> dict:
    """Runs the launch under the schedule; returns the ledger."""
    os.makedirs(FLAGS.root_dir, exist_ok=True)
    events.configure(FLAGS.root_dir, "chaos")
    log_path = os.path.join(FLAGS.root_dir, "launch.log")
    started, cpu_before = time.time(), busy_cpu_seconds()
    deadline = time.monotonic() + FLAGS.timeout_secs
    cluster = _start_cluster()
    tree = LaunchTree(os.getpid() if cluster else 0)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with open(log_path, "a") as out:
            proc = subprocess.Popen(_launch_command(kinds, cluster), stdout=out,
                                    stderr=subprocess.STDOUT)
        tree = tree if cluster else LaunchTree(proc.pid)
        injector = Injector(tree, FLAGS.root_dir, random.Random(FLAGS.seed),
                            RunEvents(FLAGS.root_dir), cluster=cluster)
        injected, plan, scheduled = _inject(proc, injector, kinds, deadline)
        final_stop = _stop(proc)
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop(proc)  # this tool interrupted: the launch stops its processes
        tree.left_behind()  # note what is below, the cluster's processes too
        if cluster:
            cluster.shutdown()
    cpu_seconds = busy_cpu_seconds() - cpu_before
    time.sleep(1.0)  # the kernel delivers the children's parent-death signals
    return _ledger(kinds, proc, tree, injector, dict(
        injected=injected, plan=plan, scheduled=scheduled, final_stop=final_stop,
        started=started, cpu_seconds=cpu_seconds))


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


def _ledger(kinds, proc, tree: LaunchTree, injector: Injector, state: dict) -> dict:
    """What the run and its faults came to, from its events (`state`: what `run()`
    gathered)."""
    read = injector.read()
    injected = state["injected"]
    if "env_exception" in kinds:
        injected["env_exception"] = env_restarts(read, "InjectedEnvFault")
    final_stop = state["final_stop"]
    stops = injector.stop_seconds + ([final_stop] if final_stop else [])
    unfired = _count_kinds(state["plan"]) if FLAGS.rounds else {}
    if unfired:
        logging.warning("chaos: the run ended before %d scheduled fault(s) fired: %s",
                        sum(unfired.values()), unfired)
    return dict(
        seed=FLAGS.seed, backend=FLAGS.backend, faults=injected,
        scheduled=state["scheduled"], unfired=unfired,
        restarts=restarts_by_child(read), env_restarts=env_restarts(read),
        **lost_to_learner_restarts(read),
        reached=reached(read, FLAGS.target, state["started"]),
        exit_status=proc.returncode,
        wall_seconds=round(time.time() - state["started"], 1),
        cpu_seconds=round(state["cpu_seconds"], 1), cores=os.cpu_count(),
        timed_out=bool(final_stop), processes_left=len(tree.left_behind()),
        unreadable_checkpoints=unreadable_checkpoints(FLAGS.root_dir),
        duplicated_unrolls=sum(e["event"] == "unroll_duplicated" for e in read),
        longest_stop_secs=round(max(stops, default=0.0), 2),
        hangs=sum(seconds > _STOP_BOUND_SECS for seconds in stops))


def main(argv) -> None:
    del argv
    try:
        kinds = parse_kinds(FLAGS.faults, FLAGS.backend)
        if not 0.0 <= FLAGS.env_fault_p <= 1.0:
            raise ValueError(f"--env_fault_p must be in [0, 1], got {FLAGS.env_fault_p}")
        if FLAGS.actors < 1:
            raise ValueError(f"--actors must be >= 1, got {FLAGS.actors}")
        if FLAGS.actor_nodes < 1:
            raise ValueError(f"--actor_nodes must be >= 1, got {FLAGS.actor_nodes}")
        if FLAGS.mean_interval_secs <= 0:
            raise ValueError(f"--mean_interval_secs must be > 0, got "
                             f"{FLAGS.mean_interval_secs}")
        if FLAGS.mean_interval_env_steps < 0:
            raise ValueError(f"--mean_interval_env_steps must be >= 0, got "
                             f"{FLAGS.mean_interval_env_steps}")
        if FLAGS.mean_interval_env_steps and not FLAGS.rounds:
            raise ValueError("--mean_interval_env_steps needs --rounds >= 1")
    except ValueError as error:
        logging.error("Bad setting: %s", error)
        sys.exit(2)
    ledger = run(kinds)
    path = FLAGS.ledger or os.path.join(FLAGS.root_dir, "ledger.json")
    with open(path, "w") as out:
        json.dump(ledger, out, indent=1)
    print(json.dumps(ledger, indent=1))
    clean = (ledger["reached"] is not None and ledger["processes_left"] == 0 and
             ledger["unreadable_checkpoints"] == 0 and ledger["duplicated_unrolls"] == 0 and
             ledger["hangs"] == 0 and ledger["exit_status"] == 0)
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
