"""A seeded fault injector around a supervised run, ending with a ledger.

    python -m alf_async.chaos --gin_file=gin_configs/ppo_chaos.gin --root_dir=runs/chaos/1 \\
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
(`alf_async.events`), never its log lines; the launch's output is
kept in ROOT_DIR/launch.log for people. Bad input: one line, exit 2.

The pieces: `faults` (the kinds, the schedule, the run's processes, the
injector) and `ledger` (the figures); this module is the command.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Callable, List, Sequence

from absl import app, flags, logging

from alf_async import events
from alf_async.chaos import ledger as chaos_ledger
from alf_async.chaos.faults import (Injector, LaunchTree, count_kinds,
                                          inject_until_done, parse_kinds, schedule)
from alf_async.tracking import settings as tracker_settings

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
    tracker_settings.define_flags()  # passed on to the launch: its learner reports there
    flags.mark_flag_as_required("root_dir")


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
            *[f"--gin_param={param}" for param in params],
            *tracker_settings.from_flags().flags()]


def _wait_for_training(proc, read: events.EventReader, deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        if read("progress"):
            return True
        time.sleep(0.2)
    return False


def progress_env_steps(read: List[dict]) -> int:
    """The most env steps any learner of the run reported (a resumed one repeats some)."""
    return max((e["env_steps"] for e in read if e["event"] == "progress"), default=0)


def _progress(read: events.EventReader) -> Callable[[], float]:
    """Where the run is on the schedule's axis: env steps or seconds from now."""
    if FLAGS.mean_interval_env_steps:
        return lambda: progress_env_steps(read("progress"))
    start = time.monotonic()
    return lambda: time.monotonic() - start


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
    from alf_async.chaos import ray_cluster  # pylint: disable=import-outside-toplevel
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
    scheduled = count_kinds(plan) if FLAGS.rounds else {}  # else: open-ended
    injected = inject_until_done(proc, injector, plan, deadline, _progress(injector.read))
    return injected, plan, scheduled


def run(kinds: List[str]) -> dict:
    """Runs the launch under the schedule; returns the ledger."""
    os.makedirs(FLAGS.root_dir, exist_ok=True)
    events.configure(FLAGS.root_dir, "chaos")
    log_path = os.path.join(FLAGS.root_dir, "launch.log")
    started, cpu_before = time.time(), chaos_ledger.busy_cpu_seconds()
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
                            events.EventReader(FLAGS.root_dir), cluster=cluster)
        injected, plan, scheduled = _inject(proc, injector, kinds, deadline)
        final_stop = _stop(proc)
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop(proc)  # this tool interrupted: the launch stops its processes
        tree.left_behind()  # note what is below, the cluster's processes too
        if cluster:
            cluster.shutdown()
    cpu_seconds = chaos_ledger.busy_cpu_seconds() - cpu_before
    time.sleep(1.0)  # the kernel delivers the children's parent-death signals
    return chaos_ledger.ledger(dict(
        seed=FLAGS.seed, backend=FLAGS.backend, kinds=kinds, injected=injected, plan=plan,
        scheduled=scheduled, stop_seconds=injector.stop_seconds, final_stop=final_stop,
        exit_status=proc.returncode, started=started, cpu_seconds=cpu_seconds),
        tree, FLAGS.root_dir, FLAGS.target)


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
        tracker_settings.from_flags().check()
    except ValueError as error:
        logging.error("Bad setting: %s", error)
        sys.exit(2)
    ledger = run(kinds)
    path = FLAGS.ledger or os.path.join(FLAGS.root_dir, "ledger.json")
    with open(path, "w") as out:
        json.dump(ledger, out, indent=1)
    print(json.dumps(ledger, indent=1))
    sys.exit(0 if chaos_ledger.clean(ledger) else 1)


def command() -> None:
    """The command line: its flags, then `main`."""
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    command()
