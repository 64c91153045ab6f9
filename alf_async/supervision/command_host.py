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
import functools
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

from alf_async.supervision import ray_site
from alf_async.supervision.commands import free_ports
from alf_async.supervision.local import LocalProcess, Spares, popen_in_session

_KEPT_LINES = 10_000  # relayed output not yet read, at most (older lines are dropped)


_NAME = "command"  # the one command of a host, for its `Spares`


class CommandHost:
    """Runs one command at a time on its node (and its warm spare), and reports on it."""

    def __init__(self):
        self.incarnation = uuid.uuid4().hex[:12]
        self._process: Optional[LocalProcess] = None
        self._spares = Spares()
        self._spare_argv: Optional[Sequence[str]] = None
        self._spare_count = 1
        self._log_path, self._cwd = None, None
        self._lines = collections.deque(maxlen=_KEPT_LINES)
        self._lock = threading.Lock()
        self._readers: Dict[int, threading.Thread] = {}  # pid: its output's reader

    def node(self) -> Dict[str, object]:
        """{'ip': the node's address, 'node_id': its Ray id ('' outside Ray), 'pid': the
        host's, 'incarnation'}."""
        ip, node_id = ray_node()
        return dict(ip=ip, node_id=node_id, pid=os.getpid(), incarnation=self.incarnation)

    def free_ports(self, count: int = 1) -> List[int]:
        """`count` different TCP ports that nothing on this node listens on now (all
        interfaces, as the learner's Reverb server binds)."""
        return free_ports(count, host="")

    def check_writable(self, root_dir: str) -> Optional[str]:
        """None when this node can write `root_dir`, else why not (one line)."""
        return writable_error(root_dir, "root_dir")

    def start(self, argv: Sequence[str], log_path: Optional[str] = None,
              cwd: Optional[str] = None,
              spare_argv: Optional[Sequence[str]] = None,
              spares: int = 1) -> Dict[str, object]:
        """Starts `argv` with this node's Python (`argv[0]` is replaced): from the warm
        spare where one is ready, else cold; its output appended to `log_path` or,
        with None, kept for `poll()`; in `cwd` where this node has it. `spares`
        spares (`spare_argv`) are kept ready beside it from the next `poll()` on.
        Returns `node()` with the command's pid and whether a spare became it."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()  # one command at a time
        self._log_path, self._cwd = log_path, cwd if cwd and os.path.isdir(cwd) else None
        spare_argv = _own_python(spare_argv) if spare_argv else None
        if spare_argv != self._spare_argv:  # its spare was made for other arguments
            self._spares.drop(wait=True)
        self._spare_argv, self._spare_count = spare_argv, spares
        process = self._spares.promote(_NAME)
        promoted = process is not None
        self._process = process or LocalProcess(self._popen(_own_python(argv)))
        return dict(self.node(), command_pid=self._process.pid, promoted=promoted)

    def _popen(self, argv: Sequence[str], spare: bool = False) -> subprocess.Popen:
        if self._log_path:
            os.makedirs(os.path.dirname(self._log_path), exist_ok=True)
            return popen_in_session(argv, self._log_path, spare=spare, cwd=self._cwd,
                                    env=ray_site.without_this_folder(os.environ))
        popen = popen_in_session(argv, stdout=subprocess.PIPE, spare=spare, cwd=self._cwd,
                                 env=ray_site.without_this_folder(os.environ))
        reader = threading.Thread(target=self._read, args=(popen.stdout,), daemon=True,
                                  name="CommandOutput")
        reader.start()
        self._readers = {pid: thread for pid, thread in self._readers.items()
                         if thread.is_alive()}
        self._readers[popen.pid] = reader
        return popen

    def _read(self, stream) -> None:
        for line in iter(stream.readline, b""):
            with self._lock:
                self._lines.append(line.decode(errors="replace"))
        stream.close()

    def poll(self) -> Dict[str, object]:
        """{'incarnation', 'returncode' (None: running or none started),
        'started', 'lines': the output lines kept since the last poll; with a
        returncode, every line the command wrote}. Keeps its spare ready."""
        process = self._process
        returncode = process.poll() if process else None
        if returncode is not None and process.pid in self._readers:
            self._readers[process.pid].join(timeout=2.0)  # the lines before the exit
        self._spares.tend(_NAME, self._spare_argv, process is not None and returncode is None,
                          functools.partial(self._popen, spare=True), self._spare_count)
        with self._lock:
            lines, self._lines = list(self._lines), collections.deque(maxlen=_KEPT_LINES)
        return dict(incarnation=self.incarnation, started=process is not None,
                    returncode=returncode, lines=lines)

    def signal(self, signum: int) -> None:
        if self._process is not None:
            self._process.signal(signum)

    def wait(self, timeout: float) -> Optional[int]:
        return self._process.wait(timeout) if self._process else None

    def drop_spare(self, wait: bool = True) -> None:
        """SIGKILLs the spare (a stop drops spares first: none is promoted meanwhile)."""
        self._spare_argv = None
        self._spares.drop(wait)


def writable_error(path: str, flag: str) -> Optional[str]:
    """None when this node can write the folder `path` (made where missing; a bucket's
    URL passes: its first write checks it), else why not, in one line naming `flag`."""
    if "://" in path:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        return f"{flag}={path!r} is not writable on node {ray_node()[0]}: {error.strerror}"
    return None


def _own_python(argv: Sequence[str]) -> list:
    """`argv` run by this node's Python."""
    return [sys.executable, *argv[1:]]


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
