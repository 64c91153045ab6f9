"""The commands a supervised run is made of: the learner and K actor processes.

`child_specs()` is what `python -m alf_async.launch` starts, on either backend:
`python -m alf_async.train --serve_port=PORT` (the primary) and
`python -m alf_async.actor --server=HOST:PORT --task=i`, each with its warm
spare's command line (`alf_async.supervision.spare`) where asked.
"""

import os
import re
import socket
import sys
import tempfile
from typing import List, Optional, Sequence

from alf_async.supervision.backend import ChildSpec
from alf_async.supervision.spare import NORMAL_PRIORITY

# Under the launch an actor waits for its learner as long as the launch runs: the
# launch, not the actor, decides when training is over.
_ACTOR_WAITS = ["ActorProcess.server_timeout_secs=1e9", "ActorProcess.connect_timeout_secs=1e9"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
                actors: int, port: int, tf_threads: int = 0,
                warm_spares: bool = False, server_host: str = "127.0.0.1") -> List[ChildSpec]:
    """The learner (primary) and `actors` actor processes serving/using
    `server_host:port`.

    With `warm_spares`, the learner's spare gets ready (imports, build, the
    update run once) at normal priority: training stops while the learner
    is down, and on a loaded machine an idle spare would never be ready.
    The actors' spares wait at idle priority: the other actors feed the
    learner meanwhile.
    """
    learner = _module_spec("learner", "alf_async.train", [
        f"--root_dir={root_dir}", f"--serve_port={port}", f"--tf_threads={tf_threads}",
        *_gin_args(gin_files, gin_params)], "normal" if warm_spares else None, primary=True)
    logs = log_dir(root_dir)
    os.makedirs(logs, exist_ok=True)
    return [learner] + [
        _module_spec(f"actor {task}", "alf_async.actor", [
            f"--server={server_host}:{port}", f"--task={task}", f"--root_dir={root_dir}",
            *_gin_args(gin_files, list(gin_params) + _ACTOR_WAITS)],
            "idle" if warm_spares else None,
            log_path=os.path.join(logs, f"actor_{task}.log"))
        for task in range(actors)]



def log_dir(root_dir: str) -> str:
    """Where the actors' logs go: `root_dir/logs`, or for a bucket (a URL, which cannot
    be appended to) a folder of each node's temp dir named after it."""
    if "://" not in root_dir:
        return os.path.join(root_dir, "logs")
    name = re.sub(r"[^\w.-]+", "_", root_dir)
    return os.path.join(tempfile.gettempdir(), "alf_async_logs", name)
