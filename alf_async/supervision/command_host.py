"""A command host: what a Ray actor of the Ray backend is, on its node.

`CommandHost` runs one command at a time on the node it lives on, with the
local backend (`local.popen_in_session`: a session of its own that dies with
the host), and answers the launch's calls about it: where it runs, whether it
exited, its newest output lines (the learner's are relayed to the launch's
console), a signal, a wait. `ray_backend` makes it a Ray actor; nothing here
imports Ray, so the tests drive it as a plain object too.

A host that Ray restarts (its worker or its node lost) comes back with a new
`incarnation` and no command: the launch reads that as its command killed,
and restarts it within the restart budget, on the host's new node.

Thread-safety: the calls come one at a time (a Ray actor's tasks run in
order); the output reader is its own thread, behind a lock.
"""

import collections
import os
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from typing import Dict, Optional, Sequence, Tuple

from alf_async.supervision.local import LocalProcess, popen_in_session

_KEPT_LINES = 10_000  # relayed output not yet read, at most (older lines are dropped)


class CommandHost:
    """Runs one command at a time on its node, and reports on it."""

    def __init__(self):
        self.incarnation = uuid.uuid4().hex[:12]
        self._process: Optional[LocalProcess] = None
        self._lines = collections.deque(maxlen=_KEPT_LINES)
        self._lock = threading.Lock()

    def node(self) -> Dict[str, object]:
        """{'ip': the node's address, 'node_id': its Ray id ('' outside Ray), 'pid': the
        host's, 'incarnation'}."""
        ip, node_id = ray_node()
        return dict(ip=ip, node_id=node_id, pid=os.getpid(), incarnation=self.incarnation)

    def free_port(self) -> int:
        """A TCP port that nothing on this node listens on now (all interfaces, as
        the learner's Reverb server binds)."""
        with socket.socket() as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]

    def check_writable(self, root_dir: str) -> Optional[str]:
        """None when this node can write `root_dir`, else why not (one line)."""
        if "://" in root_dir:
            return None  # a bucket: the learner's first write checks it
        try:
            os.makedirs(root_dir, exist_ok=True)
            with tempfile.TemporaryFile(dir=root_dir):
                pass
        except OSError as error:
            return (f"root_dir={root_dir!r} is not writable on node {ray_node()[0]}: "
                    f"{error.strerror}")
        return None

    def start(self, argv: Sequence[str], log_path: Optional[str] = None,
              cwd: Optional[str] = None) -> Dict[str, object]:
        """Starts `argv` with this node's Python (`argv[0]` is replaced), its output
        appended to `log_path` or, with None, kept for `poll()`; in `cwd` where
        this node has it. Returns `node()` with the command's pid."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()  # one command at a time
        argv = [sys.executable, *argv[1:]]
        cwd = cwd if cwd and os.path.isdir(cwd) else None
        if log_path:
            os.makedirs(os.path.dirname(log_path), exist_ok=True)
            popen = popen_in_session(argv, log_path, cwd=cwd)
        else:
            popen = popen_in_session(argv, stdout=subprocess.PIPE, cwd=cwd)
            threading.Thread(target=self._read, args=(popen.stdout,), daemon=True,
                             name="CommandOutput").start()
        self._process = LocalProcess(popen)
        return dict(self.node(), command_pid=popen.pid)

    def _read(self, stream) -> None:
        for line in iter(stream.readline, b""):
            with self._lock:
                self._lines.append(line.decode(errors="replace"))
        stream.close()

    def poll(self) -> Dict[str, object]:
        """{'incarnation', 'returncode' (None: running or none started),
        'started', 'lines': the output lines kept since the last poll}."""
        with self._lock:
            lines, self._lines = list(self._lines), collections.deque(maxlen=_KEPT_LINES)
        process = self._process
        return dict(incarnation=self.incarnation, started=process is not None,
                    returncode=process.poll() if process else None, lines=lines)

    def signal(self, signum: int) -> None:
        if self._process is not None:
            self._process.signal(signum)

    def wait(self, timeout: float) -> Optional[int]:
        return self._process.wait(timeout) if self._process else None


def ray_node() -> Tuple[str, str]:
    """This node's address as its Ray cluster knows it (127.0.0.1 on a loopback one) and
    its Ray node id; ('127.0.0.1', '') outside Ray."""
    try:
        import ray  # pylint: disable=import-outside-toplevel
        if ray.is_initialized():
            return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return "127.0.0.1", ""
