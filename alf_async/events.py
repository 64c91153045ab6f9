"""Typed run events: what each process of a run did, as JSON lines the others can read.

Every process of a run (the learner, each actor, the launch, a chaos run)
writes its events to a file of its own, `root_dir/events/<process>-<pid>.jsonl`:
a local path with the standard library, a URL (`gs://...`) through
`tf.io.gfile`, so a shared filesystem or a bucket works the same (and a
process that has not imported TensorFlow, the launch, does not import it for
its events). Buckets cannot append: each `emit()` writes the process's whole file
anew (beside it, then renamed), and a file rotates to `...-<pid>.<n>.jsonl`
after `MAX_PER_FILE` events. Events are rare (starts, checkpoints, restarts,
faults), so rewriting is cheap.

One event is one JSON object on one line:

    {"time": 1795860000.12, "process": "learner", "pid": 4242, "event": "resumed",
     "iteration": 120, "env_steps": 245760}

`KINDS` names every event and the fields it carries beside `time`, `process`,
`pid` and `event`. Readers (`read_events`) get every process's events in time
order; nothing parses another module's log lines.

Thread-safety: `emit()` may be called from any thread.
"""

import contextlib
import json
import os
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

from absl import logging

# event -> the fields it carries (besides time, process, pid, event)
KINDS: Dict[str, Tuple[str, ...]] = {
    "started": ("command",),  # a process began (a restart is a new start)
    "resumed": ("iteration", "env_steps"),  # the learner restored a checkpoint
    # the mutable settings' values the learner trains with, read from its live optimizer
    # and algorithm (at every start and resume, after the restore)
    "trains_with": ("iteration", "env_steps", "settings", "weights"),
    # the learner's final checkpoint at the end of a run: `weights` as in trains_with,
    # a digest of the algorithm's variables but the mutable settings'
    "weights_saved": ("iteration", "env_steps", "weights"),
    "checkpointed": ("iteration", "env_steps"),  # the learner wrote one
    "checkpoint_failed": ("iteration", "error"),  # a write failed; the previous one stays
    "progress": ("iteration", "env_steps", "average_return"),  # the learner's console line
    "reached_target": ("average_return", "env_steps", "seconds"),
    "restarted": ("child", "reason", "restart", "delay_secs"),  # by the launch
    "fault_injected": ("kind", "target"),  # by a chaos run
    "env_exception_survived": ("env", "error"),  # an env was rebuilt
    "unroll_duplicated": ("task", "unroll"),  # an actor's unroll reached the learner again
    "unroll_refused": ("task", "refused"),  # an item without the run's secret (a foreign client)
    "stopped": ("status",),  # the process's exit status
    "failed": ("error",),  # the one line a failing process ended with (before 'stopped')
    # population-based training (`python -m alf_async.pbt`, in ROOT/events):
    "member_ready": ("member", "generation", "env_steps", "score"),  # at a ready point
    "member_exploited": ("member", "source", "generation", "settings"),  # copied, explored
}
MAX_PER_FILE = 1000
DIRECTORY = "events"


def check(event: str, fields: dict) -> None:
    """Raises ValueError unless `event` is known and `fields` are exactly its fields."""
    if event not in KINDS:
        raise ValueError(f"unknown run event {event!r}; known: {', '.join(KINDS)}")
    if set(fields) != set(KINDS[event]):
        raise ValueError(f"run event {event!r} carries {sorted(KINDS[event])}, "
                         f"got {sorted(fields)}")


class EventLog:
    """One process's events, kept whole in memory and written whole on each `emit()`."""

    def __init__(self, root_dir: str, process: str, pid: Optional[int] = None):
        """
        Args:
            root_dir: the run's folder (local path or `gs://...`).
            process: what the process is: 'learner', 'actor 0', 'launch', ...
            pid: its process id (None: this process's).
        """
        self.process, self.pid = process, pid or os.getpid()
        self._root, self._dir = root_dir, os.path.join(root_dir, DIRECTORY)
        self._written = False  # a root_dir removed after a first write stays removed
        self._lock = threading.Lock()
        self._events: List[dict] = []
        self._part = 0

    def emit(self, event: str, **fields) -> dict:
        """Records `event` with exactly its `KINDS` fields and writes the file.

        Raises:
            ValueError: an unknown event or other fields (a programming error).
        """
        check(event, fields)
        record = dict(time=time.time(), process=self.process, pid=self.pid, event=event,
                      **fields)
        with self._lock:
            if len(self._events) == MAX_PER_FILE:
                self._events, self._part = [], self._part + 1
            self._events.append(record)
            self._write()
        return record

    def _write(self) -> None:
        """Writes the file whole; a failed write is one warning (events never end a run)."""
        files = _files(self._root)
        name = f"{self.process.replace(' ', '_')}-{self.pid}"
        path = os.path.join(self._dir, name + (f".{self._part}" if self._part else "")
                            + ".jsonl")
        try:
            if self._written and not files.exists(self._root):
                return  # a run that failed at its start removed its folder
            files.makedirs(self._dir)
            with files.open(path + ".writing", "w") as out:
                out.write("".join(json.dumps(e, sort_keys=True) + "\n" for e in self._events))
            files.rename(path + ".writing", path)
            self._written = True
        except Exception as error:  # pylint: disable=broad-except  # OSError, tf's OpError
            logging.warning("Run event not written to %s: %s", path, error)


class _LocalFiles:
    """The file operations events need, on a local path (no TensorFlow)."""
    exists, isdir, listdir, open, size = (
        staticmethod(os.path.exists), staticmethod(os.path.isdir), staticmethod(os.listdir),
        staticmethod(open), staticmethod(os.path.getsize))

    @staticmethod
    def makedirs(path: str) -> None:
        os.makedirs(path, exist_ok=True)

    @staticmethod
    def rename(source: str, target: str) -> None:
        os.replace(source, target)


class _GFiles:
    """The same through `tf.io.gfile`: `gs://`, `s3://`, `hdfs://` and other URLs."""

    def __init__(self):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self._gfile = tf.io.gfile
        self.exists, self.isdir, self.listdir = (tf.io.gfile.exists, tf.io.gfile.isdir,
                                                 tf.io.gfile.listdir)
        self.makedirs, self.open = tf.io.gfile.makedirs, tf.io.gfile.GFile

    def size(self, path: str) -> int:
        return self._gfile.stat(path).length

    def rename(self, source: str, target: str) -> None:
        self._gfile.rename(source, target, overwrite=True)


def _files(path: str):
    """`_GFiles` for a URL, else `_LocalFiles`."""
    return _GFiles() if "://" in path else _LocalFiles


_log: Optional[EventLog] = None
_held_start: Optional[str] = None  # a warm spare's command, 'started' at its promotion


def configure(root_dir: Optional[str], process: str) -> Optional[EventLog]:
    """Makes `emit()` write this process's events under `root_dir` (None: nowhere)."""
    global _log  # pylint: disable=global-statement
    _log = EventLog(root_dir, process) if root_dir else None
    return _log


def emit(event: str, **fields) -> Optional[dict]:
    """`EventLog.emit` on this process's log, if `configure()` set one (else only the
    check of the fields)."""
    check(event, fields)
    return _log.emit(event, **fields) if _log is not None else None


@contextlib.contextmanager
def lifetime(root_dir: Optional[str], process: str, command: str,
             held: bool = False) -> Iterator[None]:
    """This process's events go under `root_dir`: 'started' now (`held`: at
    `announce()`, a warm spare's promotion), and 'stopped' with the exit status when
    the block ends (a `SystemExit`'s, 0, or 1 for an error), if it started."""
    global _held_start  # pylint: disable=global-statement
    configure(root_dir, process)
    _held_start = command
    if not held:
        announce()
    status = 1
    try:
        yield
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        raise
    finally:
        if _held_start is None:  # a spare never promoted was never this process's start
            emit("stopped", status=status)


def announce() -> None:
    """Emits the 'started' that `lifetime(held=True)` held back (once)."""
    global _held_start  # pylint: disable=global-statement
    if _held_start is not None:
        command, _held_start = _held_start, None
        emit("started", command=command)


class EventReader:
    """Every process's events under `root_dir`, each file read again only where it
    grew: a tool that polls a running run (the chaos injector) reads each event once.

    Thread-safety: one caller at a time.
    """

    def __init__(self, root_dir: str):
        self._files = _files(root_dir)
        self._folder = os.path.join(root_dir, DIRECTORY)
        self._read: Dict[str, Tuple[int, List[dict]]] = {}  # name: (size, its events)

    def __call__(self, event: Optional[str] = None, since: float = 0.0) -> List[dict]:
        """The events (of kind `event`, after time `since`), in time order (a line
        torn by a crash of the file system is skipped)."""
        if self._files.isdir(self._folder):
            for name in sorted(self._files.listdir(self._folder)):
                if name.endswith(".jsonl"):
                    self._update(name)
        found = [e for _, read in self._read.values() for e in read
                 if (event is None or e["event"] == event) and e["time"] > since]
        return sorted(found, key=lambda e: e["time"])

    def _update(self, name: str) -> None:
        path = os.path.join(self._folder, name)
        try:
            size = self._files.size(path)
            if self._read.get(name, (None,))[0] == size:
                return
            with self._files.open(path) as lines:
                read = parse_lines(lines)
        except Exception:  # pylint: disable=broad-except  # gone meanwhile: OSError, OpError
            return
        self._read[name] = (size, read)


def parse_lines(lines) -> List[dict]:
    """The JSON objects of a JSON-lines file's lines; a line torn by a crash is skipped
    (run events here; the population's lineage too)."""
    read = []
    for line in lines:
        try:
            read.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return read


def read_events(root_dir: str) -> List[dict]:
    """Every process's events under `root_dir`, in time order (a line torn by a
    crash of the file system is skipped)."""
    return EventReader(root_dir)()
