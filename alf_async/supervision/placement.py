"""Where the runs of the many-runs commands run: subprocesses here, or Ray nodes.

`experiment run`, `tune` and `pbt` start each of their runs (a seed, a search
worker, a population member) as an ordinary command through a placement:

- `LocalPlacement` (`--backend=local`): a subprocess of this host in a session
  of its own (`start_training`).
- `RayPlacement` (`--backend=ray [--address=HOST:PORT]`): a `CommandHost` Ray
  actor per run (the launch's machinery, `supervision.ray_backend`), placed
  by `--<unit>_resources` and spread over the nodes, its output appended to
  the run's `train.log`. Without an address it starts a Ray of its own on this
  host, as the launch does. Every node that could hold a run must write the
  output folder, checked at the start. A run whose node is lost reads as
  killed with `lost` set; the caller starts it again (it resumes from its
  checkpoint) on a node with room. `node.json` in a run's folder lists the
  nodes it ran on, for the report's node column. A run's loss can reach us
  before Ray marks its node dead; no run starts until it has (`LostNodes`),
  so none is placed on the node just lost.

Both are a `Placement`, and hand back `backend.Process`es (`poll`, `signal`,
`wait`, `lost`). They are chosen by the launch's name for the same place
(`backends.BACKENDS`: `make_placement`), so that the launch, chaos,
`experiment`, `tune` and `pbt` share one backend list.

Thread-safety: used from one thread.
"""

import functools
import os
import subprocess
import time
from typing import Callable, Dict, List, Optional, Protocol, Set

from alf_async.runs import layout
from alf_async.supervision import reaper
from alf_async.supervision.local import LocalProcess



class Placement(Protocol):
    """Where the runs of a many-runs command go (`LocalPlacement`, `RayPlacement`).

    Attributes:
        name: its name in `backends.BACKENDS`.
        nodes: the nodes a run may land on.
        retries: times a lost run (a tune worker: a dead one too) starts again.
    """
    name: str
    nodes: int
    retries: int

    def capacity(self, parallel: int) -> int:
        """How many runs go at once, given `--parallel` (0: as many as there is room)."""

    def tf_threads(self, parallel: int) -> int:
        """Each run's `--tf_threads` when `parallel` run at once."""

    def start(self, name: str, command: List[str], root_dir: str, relay: bool = False):
        """Starts `command`, its output to `root_dir/train.log` (`relay`: this console);
        returns its `backend.Process`."""

    def forget(self, process) -> None:
        """Lets go of an ended run's process (and what holds it)."""

    def close(self) -> None:
        """Ends every run still going and what was started for them."""


def start_training(command: List[str], root_dir: str) -> subprocess.Popen:
    """Starts `command` here in its own session, output appended to `root_dir/train.log`.

    Its own session: a Ctrl-C at the terminal reaches the caller only, which
    stops the run with one SIGTERM (a second SIGINT would end it unsaved).
    """
    os.makedirs(root_dir, exist_ok=True)
    with open(os.path.join(root_dir, layout.LOG_FILE), "ab") as log:
        return _popen(command, stdout=log, stderr=subprocess.STDOUT)


def _popen(command: List[str], **kwargs) -> subprocess.Popen:
    """`command` in a session of its own, under the rule for a parent's death (`reaper`:
    SIGTERM when this process dies, SIGKILL a grace later)."""
    popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=functools.partial(reaper.die_with_parent, os.getpid()),
                             **kwargs)
    reaper.guard(popen.pid)
    return popen


class LocalPlacement:
    """Runs as subprocesses of this host."""

    name = "local"
    nodes = 1  # the nodes runs may land on: this host

    def __init__(self, retries: int = 0):
        """`retries`: times a tune worker that dies is started again (a run here is
        never lost to its node, so seeds and members are not started again)."""
        self.retries = retries

    def capacity(self, parallel: int) -> int:
        """How many runs go at once: `parallel` (0: one)."""
        return parallel or 1

    @staticmethod
    def tf_threads(parallel: int) -> int:
        """Each run's `--tf_threads`: its share of this host's cores."""
        return max(1, (os.cpu_count() or 1) // parallel)

    def start(self, name: str, command: List[str], root_dir: str,
              relay: bool = False) -> LocalProcess:
        """Starts `command`, its output appended to `root_dir/train.log` (`relay`: to this
        process's output instead); `name` is unused."""
        del name
        if relay:
            return LocalProcess(_popen(command))
        return LocalProcess(start_training(command, root_dir))

    def forget(self, process) -> None:
        pass

    def close(self) -> None:
        pass


class LostNodes:
    """The nodes of lost runs that Ray may still count alive, and a wait for them.

    A run's loss reaches us the moment its host's connection breaks; Ray's health
    check marks the node dead only seconds later, and until then Ray may place a
    new run on that node, where it is lost again at once. `settle()` returns once
    Ray counts none of them alive, or `window_secs` after a loss (then the node
    was fine: only the run's worker died).

    Thread-safety: used from one thread.
    """

    def __init__(self, alive: Callable[[], Set[str]], window_secs: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        """`alive()`: the ids of the nodes Ray counts alive now."""
        self._alive, self._window, self._clock, self._sleep = alive, window_secs, clock, sleep
        self._until: Dict[str, float] = {}  # a node id: when to stop waiting for it

    def lost(self, node_id: Optional[str]) -> None:
        """Notes that a run on `node_id` was lost (None: it never started)."""
        if node_id:
            self._until[node_id] = self._clock() + self._window

    def settle(self, poll_secs: float = 0.2) -> None:
        """Waits until Ray counts no lost run's node alive (each at most its window)."""
        while self._until:
            now, alive = self._clock(), self._alive()
            self._until = {node: until for node, until in self._until.items()
                           if node in alive and now < until}
            if self._until:
                self._sleep(poll_secs)


class RayPlacement:
    """Runs as commands of `CommandHost` Ray actors, one per run, over a Ray cluster."""

    name = "ray"

    def __init__(self, address: Optional[str], resources: Dict[str, float], out_dir: str,
                 retries: int, unit: str = "seed", command: str = "experiment"):
        """Connects (or starts a Ray of its own), and checks the cluster's room.

        Raises:
            ValueError: Ray is missing, `address` does not answer, no node has
                `resources`, or a node that could run one cannot write `out_dir`.
        """
        from alf_async.supervision import ray_backend  # pylint: disable=import-outside-toplevel
        from alf_async.supervision.command_host import CommandHost  # pylint: disable=import-outside-toplevel
        self._session = ray_backend.RaySession(address, who=command)
        self._ray, self._unit, self._command = self._session.ray, unit, command
        self.retries, self._resources = retries, resources
        self._host_class = self._ray.remote(CommandHost)
        self._hosts: Dict[int, object] = {}  # id(process): its host
        self._lost = LostNodes(lambda: {node["NodeID"] for node in self._session.nodes()},
                               self._session.death_secs())
        try:
            self.room = self._session.check_room(f"--{unit}_resources", resources, 1)
            self.nodes = sum(bool(self._session.room_on(node, resources))
                             for node in self._session.nodes())
            self._check_out(out_dir)
        except ValueError:
            self.close()
            raise

    def _check_out(self, out_dir: str) -> None:
        """ValueError (one line) unless every node with room for a run writes `out_dir`."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=import-outside-toplevel
        from alf_async.supervision.command_host import writable_error  # pylint: disable=import-outside-toplevel
        check = self._ray.remote(num_cpus=0)(writable_error)
        nodes = [node["NodeID"] for node in self._session.nodes()
                 if self._session.room_on(node, self._resources)]
        answers = self._ray.get([check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node, soft=False)).remote(out_dir, "--out") for node in nodes], timeout=120)
        errors = [answer for answer in answers if answer]
        if errors:
            raise ValueError(f"{errors[0]} (every node that runs a {self._unit} must write it: "
                             f"storage that the nodes share)")

    def capacity(self, parallel: int) -> int:
        """How many runs go at once: the cluster's room at the start, at most `parallel`
        (0: no limit)."""
        return min(parallel, self.room) if parallel else self.room

    def tf_threads(self, parallel: int) -> int:
        """Each run's `--tf_threads`: the CPUs it asks for (1 if none)."""
        del parallel
        return max(1, int(self._resources.get("CPU", 1)))

    def start(self, name: str, command: List[str], root_dir: str, relay: bool = False):
        """Starts `command` on a new host, its output appended to `root_dir/train.log`
        (`relay`: to this process's stderr instead, as it comes). Waits first until Ray
        marks the nodes of lost runs dead (`LostNodes`)."""
        from alf_async.supervision.ray_backend import RayProcess  # pylint: disable=import-outside-toplevel
        self._lost.settle()
        options = self._session.host_options(self._resources, max_restarts=0)
        host = self._host_class.options(**options, scheduling_strategy="SPREAD").remote()
        log_path = None if relay else os.path.join(root_dir, layout.LOG_FILE)
        started = host.start.remote(command, log_path, os.getcwd(), None, 0)
        process = RayProcess(self._ray, name, host, started, relay=relay, who=self._command,
                             on_node=lambda _, address: layout.note_node(root_dir, address),
                             on_lost=lambda *_: None)
        self._hosts[id(process)] = host
        return process

    def forget(self, process) -> None:
        """Kills an ended run's host (a lost one's too, wherever Ray holds it)."""
        if process.lost:
            self._lost.lost(process.node)
        host = self._hosts.pop(id(process), None)
        if host is not None:
            self._session.kill([host])

    def close(self) -> None:
        """Kills every host (their commands die with them); shuts a Ray of its own down."""
        self._session.kill(self._hosts.values())
        self._hosts = {}
        self._session.close()
