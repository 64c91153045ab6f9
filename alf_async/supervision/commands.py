"""The commands a supervised run is made of: the learner and K actor processes.

`child_specs()` is what `python -m alf_async.launch` starts, on either backend:
`python -m alf_async.train --serve_port=PORT` (the primary) and
`python -m alf_async.actor --server=HOST:PORT --task=i`, each with its warm
spare's command line (`alf_async.supervision.spare`) where asked. A learner of
N workers (`--learner_workers`) is N train commands, each with `--tf_config`
naming the N workers' all-reduce addresses and its index, each serving its own
actors (actor task i: worker i mod N).
"""

import dataclasses
import json
import os
import re
import socket
import sys
import tempfile
from typing import List, NamedTuple, Optional, Sequence

from alf_async.supervision.backend import ChildSpec
from alf_async.supervision.spare import NORMAL_PRIORITY

# Under the launch an actor waits for its learner as long as the launch runs: the
# launch, not the actor, decides when training is over.
_ACTOR_WAITS = ["ActorProcess.server_timeout_secs=1e9", "ActorProcess.connect_timeout_secs=1e9"]


class LearnerWorker(NamedTuple):
    """Where one worker of the learner runs.

    Attributes:
        host: its node's address, which its actors dial.
        port: its Reverb server's port (`--serve_port`).
        collective_port: its all-reduce port (a learner of several workers).
    """
    host: str
    port: int
    collective_port: int = 0


def free_ports(count: int = 1, host: str = "127.0.0.1") -> List[int]:
    """`count` different TCP ports on `host` ('': all interfaces) that nothing
    listens on now (held together while they are picked)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind((host, 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _gin_args(gin_files: Sequence[str], gin_params: Sequence[str]) -> List[str]:
    return ([f"--gin_file={path}" for path in gin_files]
            + [f"--gin_param={param}" for param in gin_params])


def _module_spec(name: str, module: str, args: List[str], spare: Optional[str],
                 **kwargs) -> ChildSpec:
    """`python -m module args`, with its `alf_async.supervision.spare` command at `spare` priority
    ('idle' or 'normal'; None: no spare)."""
    options = [NORMAL_PRIORITY] if spare == "normal" else []
    spare_argv = ([sys.executable, "-m", "alf_async.supervision.spare", *options, module, *args]
                  if spare else None)
    return ChildSpec(name, [sys.executable, "-m", module, *args], spare_argv=spare_argv,
                     **kwargs)


def child_specs(root_dir: str, gin_files: Sequence[str], gin_params: Sequence[str],
                actors: int, workers: Sequence[LearnerWorker], tf_threads: int = 0,
                warm_spares: bool = False, learner_spares: int = 1,
                actor_spares: int = 1, chief_flags: Sequence[str] = ()) -> List[ChildSpec]:
    """The learner's workers (the first, the chief, is the primary, with
    `chief_flags` added: its tracker's) and `actors` actor processes, actor task i
    using worker i mod N's server.

    With `warm_spares`, each learner worker keeps `learner_spares` spares,
    each getting ready (imports, build, the update run once) at normal
    priority: training stops while the learner is down, and on a loaded
    machine an idle spare would never be ready. Each actor keeps
    `actor_spares` (0 or 1), getting ready at idle priority: the other actors
    feed the learner meanwhile.
    """
    logs = log_dir(root_dir)
    os.makedirs(logs, exist_ok=True)
    learners = [dataclasses.replace(
        _worker_spec(root_dir, gin_files, gin_params, workers, index, tf_threads, warm_spares,
                     logs, chief_flags), spares=learner_spares) for index in range(len(workers))]
    return learners + [
        _module_spec(f"actor {task}", "alf_async.actor", [
            f"--server={_server(workers[task % len(workers)])}", f"--task={task}",
            f"--root_dir={root_dir}", *_gin_args(gin_files, list(gin_params) + _ACTOR_WAITS)],
            "idle" if warm_spares and actor_spares else None,
            log_path=os.path.join(logs, f"actor_{task}.log"))
        for task in range(actors)]


def _server(worker: LearnerWorker) -> str:
    return f"{worker.host}:{worker.port}"


def _worker_spec(root_dir: str, gin_files: Sequence[str], gin_params: Sequence[str],
                 workers: Sequence[LearnerWorker], index: int, tf_threads: int,
                 warm_spares: bool, logs: str, chief_flags: Sequence[str]) -> ChildSpec:
    """Worker `index` of the learner: 'learner' (the chief: the primary, on the
    console) or 'learner i' (its exit 0 is its own end; its log in `logs`)."""
    args = [f"--root_dir={root_dir}", f"--serve_port={workers[index].port}",
            f"--tf_threads={tf_threads}"]
    if len(workers) > 1:
        cluster = [f"{worker.host}:{worker.collective_port}" for worker in workers]
        args.append("--tf_config=" + json.dumps(
            {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}))
        gin_params = [*gin_params, "create_strategy.kind='multi_worker'"]
    spare = "normal" if warm_spares else None
    gang = "learner" if len(workers) > 1 else None  # one all-reduce group: restart together
    if not index:
        return _module_spec("learner", "alf_async.train", [
            *args, *chief_flags, *_gin_args(gin_files, gin_params)], spare, primary=True,
            gang=gang)
    return _module_spec(f"learner {index}", "alf_async.train",
                        args + _gin_args(gin_files, gin_params), spare, finishes=True,
                        log_path=os.path.join(logs, f"learner_{index}.log"), gang=gang)


def log_dir(root_dir: str) -> str:
    """Where the actors' logs go: `root_dir/logs`, or for a bucket (a URL, which cannot
    be appended to) a folder of each node's temp dir named after it."""
    if "://" not in root_dir:
        return os.path.join(root_dir, "logs")
    name = re.sub(r"[^\w.-]+", "_", root_dir)
    return os.path.join(tempfile.gettempdir(), "alf_async_logs", name)
