"""Sends what a run writes to its tracker from a background thread.

`ScalarReader` reads the scalars TensorBoard got from `root_dir/train` back, a
file's new events at each call, and puts each against env steps. `Forwarder`
sends them, the operative config's bindings and new videos every few
seconds; at the end `result.json`, the configs and the exported policy.

A tracker that fails (a server down, a full disk) never stops or slows
training: the first failure logs one warning line, the points wait in a
bounded buffer (the oldest dropped beyond it, and counted), and every send
retries; the line that it works again says what was kept.
"""

import bisect
import collections
import dataclasses
import contextlib
import os
import logging as std_logging
import re
import threading
import time
from typing import Callable, Deque, Dict, Iterator, List, Optional

from absl import logging
from tensorboard.backend.event_processing import event_file_loader, io_wrapper
from tensorboard.util import tensor_util

from alf_async import config
from alf_async.tracking import settings as tracker_settings
from alf_async.tracking.clients import Point, Tracker, make_tracker
from alf_async.runs import layout

ENV_STEPS_TAG = "Metrics/EnvironmentSteps"  # at each summarized iteration
# Families whose steps are env steps already; the others count iterations.
_ENV_STEP_FAMILIES = ("Metrics_vs_EnvironmentSteps/", "Metrics_by_env/")
END_FILES = (layout.RESULT_FILE, "operative_config.gin", layout.SETTINGS_FILE)
# TensorBoard's reader says at INFO each time it reaches a file's end.
std_logging.getLogger("tensorboard").setLevel(std_logging.WARNING)


class ScalarReader:
    """The scalar summaries of a TensorBoard directory, new ones at each `read()`,
    those after `after_wall_time` only.

    A summary at an iteration waits until the env steps of an iteration at or
    past it are read (`ENV_STEPS_TAG`), then goes at those of the latest
    iteration at or before it. Every event file is read to its end at each
    call (TensorBoard's `DirectoryWatcher` reads only the newest by name, and
    `...<pid>.10.v2` sorts before `...<pid>.9.v2`). Not thread-safe.
    """

    def __init__(self, directory: str, after_wall_time: float = 0.0):
        self._directory = directory
        self._after = after_wall_time  # events up to it were sent by an earlier start
        self.read_until = after_wall_time  # the wall time of the last event read
        self._loaders: Dict[str, event_file_loader.EventFileLoader] = {}
        self._iterations: List[int] = []  # sorted
        self._env_steps: List[int] = []
        self._waiting: List[Point] = []  # steps: iterations

    def read(self, final: bool = False) -> List[Point]:
        """The scalars written since the last call; `final`: also those whose env
        steps are not known yet, at the last known ones."""
        ready = []
        for event in self._events():
            if event.wall_time <= self._after:
                continue
            self.read_until = max(self.read_until, event.wall_time)
            for value in event.summary.value:
                number = _number(value)
                if number is None:
                    continue
                if value.tag == ENV_STEPS_TAG:
                    self._learn(event.step, int(number))
                if value.tag.startswith(_ENV_STEP_FAMILIES):
                    ready.append(Point(value.tag, event.step, number))
                else:
                    self._waiting.append(Point(value.tag, event.step, number))
        return ready + self._place(final)

    def _events(self) -> Iterator:
        """The events written since the last call, file by file in the order
        they were made."""
        names = os.listdir(self._directory) if os.path.isdir(self._directory) else []
        for name in sorted(names, key=_natural_order):
            path = os.path.join(self._directory, name)
            if io_wrapper.IsSummaryEventsFile(path):
                if name not in self._loaders:
                    self._loaders[name] = event_file_loader.EventFileLoader(path)
                yield from self._loaders[name].Load()

    def _learn(self, iteration: int, env_steps: int) -> None:
        at = bisect.bisect_left(self._iterations, iteration)
        if at < len(self._iterations) and self._iterations[at] == iteration:
            self._env_steps[at] = env_steps
        else:
            self._iterations.insert(at, iteration)
            self._env_steps.insert(at, env_steps)

    def _place(self, final: bool) -> List[Point]:
        if not self._iterations:
            return []
        placed, waiting = [], []
        for point in self._waiting:
            if point.env_steps > self._iterations[-1] and not final:
                waiting.append(point)
                continue
            at = max(bisect.bisect_right(self._iterations, point.env_steps) - 1, 0)
            placed.append(Point(point.tag, self._env_steps[at], point.value))
        self._waiting = waiting
        return placed


def _natural_order(name: str) -> list:
    """`name`'s sort key with its digit runs as numbers: `x.9.v2` before `x.10.v2`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _number(value) -> Optional[float]:
    """A summary value's number, or None (text, histograms, images)."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor") and not value.tensor.tensor_shape.dim:
        array = tensor_util.make_ndarray(value.tensor)
        if array.dtype.kind in "fiub":
            return float(array)
    return None


def bindings(root_dir: str) -> Optional[Dict[str, str]]:
    """The operative config's bindings as `scope/configurable.parameter` -> value,
    or None before the run wrote it."""
    try:
        with open(os.path.join(root_dir, "operative_config.gin")) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return {"/".join(filter(None, [scope, f"{name}.{param}"])): repr(value)
            for (scope, name, param), value in config.gin_bindings(text).items()}


class Forwarder:
    """Sends a run's summaries, settings and files to a tracker from its own thread.

    `start()` once the run is under way, `close(ok)` at its end (from the same
    thread that started it).
    """

    def __init__(self, root_dir: str, tracker: Tracker, settings, tags: Dict[str, str],
                 interval_secs: float = 5.0, buffer: int = 100_000):
        self._root_dir, self._tracker, self._settings = root_dir, tracker, settings
        self._tags, self._interval = tags, interval_secs
        self._sent_key = f"{settings.kind}_sent_until"
        self._reader = ScalarReader(os.path.join(root_dir, "train"), tracker_settings.
                                    read_run_file(root_dir).get(self._sent_key, 0.0))
        self._pending: Deque[Point] = collections.deque(maxlen=buffer)
        self._dropped = 0
        self._opened = self._params_sent = False
        self._videos_sent: set = set()
        self._failing: Optional[str] = None
        self._sent_last = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="TrackerThread", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, exit_code: int, flush_secs: float = 30.0) -> bool:
        """Stops the thread, sends what is left and the end files, ends the tracker
        run with the command's `exit_code`; returns whether everything went (else
        one warning line said what not). A finished run (exit 0) retries for up to
        `flush_secs`; a stopped or failed one tries once, so that a supervisor's
        stop grace is not spent here. A run that never wrote its operative config
        (a bad setting) makes no tracker run."""
        self._stop.set()
        self._thread.join(flush_secs)
        if not self._opened and bindings(self._root_dir) is None:
            return True
        self._collect(final=True)
        deadline = time.monotonic() + (flush_secs if exit_code == 0 else 0.0)
        while not (sent := self._attempt(self._send)
                   and self._attempt(lambda: self._send_end(exit_code))):
            if time.monotonic() >= deadline:
                logging.warning("Tracker %s: %d points and the run's end files were not "
                                "sent; the same command run again sends them from the "
                                "TensorBoard files once the tracker answers",
                                self._settings.kind, len(self._pending))
                break
            time.sleep(1.0)
        return sent

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._collect()
            self._attempt(self._send)

    def _collect(self, final: bool = False) -> None:
        points = self._reader.read(final)
        overflow = len(self._pending) + len(points) - self._pending.maxlen
        self._dropped += max(overflow, 0)
        self._pending.extend(points)

    def _attempt(self, step: Callable[[], None]) -> bool:
        """Runs `step`; the first failure in a row logs one warning, the first success
        after failures one line."""
        try:
            step()
        except Exception as error:  # pylint: disable=broad-except
            if self._failing is None:
                logging.warning("Tracker %s failed (%s); training goes on, %d points kept "
                                "(at most %d) and sent again in the background",
                                self._settings.kind, _line(error), len(self._pending),
                                self._pending.maxlen)
            self._failing = _line(error)
            return False
        if self._failing is not None:
            logging.info("Tracker %s works again: %d points kept were sent%s",
                         self._settings.kind, self._sent_last,
                         f", {self._dropped} oldest dropped" if self._dropped else "")
            self._failing = None
        return True

    def _send(self) -> None:
        if not self._opened and bindings(self._root_dir) is None:
            return  # not started yet
        kind = self._settings.kind
        if not self._opened:
            run_id = tracker_settings.read_run_file(self._root_dir).get(kind)
            run_id = self._tracker.open(run_id, self._tags, self._root_dir)
            tracker_settings.update_run_file(self._root_dir, **{kind: run_id})
            self._opened = True
        params = None if self._params_sent else bindings(self._root_dir)
        if params is not None:
            self._tracker.log_params(params)
            self._params_sent = True
        points, read_until = list(self._pending), self._reader.read_until
        if points:
            self._tracker.log_points(points)
            tracker_settings.update_run_file(self._root_dir, **{self._sent_key: read_until})
        for _ in points:
            self._pending.popleft()
        self._sent_last = len(points)
        self._send_videos()

    def _send_videos(self) -> None:
        folder = os.path.join(self._root_dir, "videos")
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            if name not in self._videos_sent and name.endswith((".gif", ".mp4")):
                self._tracker.log_file(os.path.join(folder, name), "videos")
                self._videos_sent.add(name)

    def _send_end(self, exit_code: int) -> None:
        for name in END_FILES:
            path = os.path.join(self._root_dir, name)
            if os.path.exists(path):
                self._tracker.log_file(path)
        policy = os.path.join(self._root_dir, layout.POLICY_DIR)
        if exit_code == 0 and os.path.isdir(policy):
            self._tracker.log_file(policy)
        self._tracker.close(exit_code)



def _line(error: BaseException, most: int = 120) -> str:
    """`Type: first line`, cut at a word's end within `most` characters."""
    text = str(error).strip().splitlines()
    if not text:
        return type(error).__name__
    first = text[0] if len(text[0]) <= most else text[0][:most].rsplit(" ", 1)[0] + " ..."
    return f"{type(error).__name__}: {first}"


@contextlib.contextmanager
def tracked(root_dir: str, settings: tracker_settings.TrackerSettings,
            tags: Dict[str, str]) -> Iterator[None]:
    """Reports the run in `root_dir` to `settings`' tracker, with `tags` (its
    provenance), while the block runs (a
    `SystemExit` in it gives the run's status: 0 finished, 128 + N stopped by
    signal N, else failed). Nothing where `settings.kind` is "none"."""
    if not settings.enabled:
        yield
        return
    name = settings.name or "/".join(os.path.abspath(root_dir).split(os.sep)[-2:])
    settings = dataclasses.replace(settings, name=name)
    forwarder = Forwarder(root_dir, make_tracker(settings), settings, tags)
    forwarder.start()
    exit_code = 1
    try:
        yield
        exit_code = 0
    except SystemExit as exit_:
        exit_code = exit_.code if isinstance(exit_.code, int) else 1
        raise
    finally:
        forwarder.close(exit_code)
