"""The Ray backend: the launch's processes hosted by Ray actors on a Ray cluster.

    python -m alf_async.launch --backend=ray --address=auto ...

Each process of the run (the learner, actor task i) gets a `CommandHost` Ray
actor, placed by its resources (`--learner_resources`, `--actor_resources`;
the actors spread over the nodes), that runs the same command as the local
backend (`python -m alf_async.train`, `python -m alf_async.actor`) on its
node. Ray restarts a host whose worker or node is lost (`max_restarts`), on a
node that has its resources; the launch sees the new incarnation as its
command killed and starts the command again within the restart budget, as
for a local process. The learner's output is relayed to the launch's
console; an actor's goes to `root_dir/logs/actor_<i>.log` on its node.

Without `--address` the backend starts a Ray of its own on this host (on
127.0.0.1, no usage statistics, no token auth) and shuts it down at the end;
with one it joins that cluster and leaves it running. It never runs
`ray stop`, which would end every Ray of the user.

Thread-safety: used from the supervisor's one thread.
"""

import os
import shutil
import signal
import socket
import sys
import tempfile
from typing import Callable, Dict, List, Optional

from absl import logging

from alf_async import extras
from alf_async.supervision.backend import ChildSpec
from alf_async.supervision import ray_site, reaper
from alf_async.supervision.command_host import CommandHost
from alf_async.supervision.ray_reports import RayReports

# A Ray this backend starts on one host: every socket on 127.0.0.1, no report of
# usage statistics over the internet, no token auth; and HTTP to anything but
# loopback through a proxy on a closed loopback port, so that Ray's cloud probes
# (its dashboard asks the metadata server at 169.254.169.254 even with usage
# statistics off) reach nothing. Set before `import ray`; a user's own settings win.
LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                 "RAY_AUTH_MODE": "disabled", "http_proxy": "http://127.0.0.1:9",
                 "no_proxy": "127.0.0.1,localhost,::1"}
_CALL_TIMEOUT_SECS = 120.0  # a host call that waits for its host to come back, at most
_LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024  # nothing big travels through Ray here


def import_ray():
    """`ray`, for a local Ray with `LOCAL_RAY_ENV`; ValueError naming the extra if absent."""
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    extras.check_installed("ray", "ray", "--backend=ray")
    return ray_site.import_ray_without_pydantic()


def check_address(address: str) -> None:
    """Raises ValueError unless `address` ('auto' or HOST:PORT of a Ray head's GCS)
    answers within 5 s."""
    if address == "auto":
        return  # ray.init finds the cluster started on this node, or says it found none
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            pass
    except (OSError, ValueError) as error:
        raise ValueError(f"--address={address}: no Ray cluster answers there "
                         f"({getattr(error, 'strerror', None) or error})") from None


class RaySession:
    """This process's connection to a Ray cluster (`address`), or to a Ray of its own
    on this host (None: on 127.0.0.1, reaped with this process, shut down by
    `close()`); what the launch and the many-runs commands place their commands on.

    Thread-safety: used from one thread.
    """

    def __init__(self, address: Optional[str], reports: Optional[str] = None,
                 who: str = "launch"):
        """Connects (Ray's own error reports to the file `reports`, `ray_reports`; None:
        Ray prints them); `who` names the command in its console lines.

        Raises:
            ValueError: Ray is missing or `address` does not answer (one line).
        """
        self.ray = import_ray()
        if address:
            check_address(address)
        self._owns_ray, self._temp_dir = not address, None
        if reports:
            import ray._private.worker  # pylint: disable=import-outside-toplevel,protected-access
            RayReports(reports).install(ray._private.worker)  # pylint: disable=protected-access
        kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        logging.info("%s: %s (Ray's start takes 10-30 s)", who,
                     f"joining the Ray cluster at {address}" if address else
                     "starting a Ray of its own on this host, on loopback")
        if address:
            try:
                with ray_site.pydantic_hidden():  # the driver's own processes
                    self.ray.init(address=address, **kwargs)
            except ConnectionError as error:
                raise ValueError(f"--address={address}: {error}") from None
            return
        self._temp_dir = tempfile.mkdtemp(prefix="alf_ray_")  # short: socket paths
        reaper.start(self._temp_dir)  # what Ray leaves, gone when this process is
        with ray_site.pydantic_hidden():
            self.ray.init(**kwargs, object_store_memory=_LOCAL_OBJECT_STORE_BYTES,
                          _temp_dir=self._temp_dir)

    def nodes(self) -> List[dict]:
        """The live nodes (Ray's `ray.nodes()` entries)."""
        return [node for node in self.ray.nodes() if node["Alive"]]

    def death_secs(self) -> float:
        """The longest Ray's health check takes to mark a dead node dead, in seconds."""
        config = self.ray._raylet.Config  # pylint: disable=protected-access
        return (config.health_check_period_ms() * config.health_check_failure_threshold()
                + config.health_check_timeout_ms()) / 1000.0

    @staticmethod
    def room_on(node: dict, resources: Dict[str, float]) -> int:
        """How many commands of `resources` node `node` (a `nodes()` entry) holds at once."""
        return min([int(node["Resources"].get(key, 0) // amount) for key, amount
                    in resources.items() if amount > 0], default=1)

    def room(self, resources: Dict[str, float]) -> int:
        """How many commands of `resources` the live nodes hold at once."""
        return sum(self.room_on(node, resources) for node in self.nodes())

    def check_room(self, flag: str, resources: Dict[str, float], count: int,
                   count_flag: str = "") -> int:
        """The room for `resources`; ValueError (one line naming `flag`) unless the live
        nodes hold `count` of them at once."""
        room = self.room(resources)
        if not room:
            kinds = sorted({k for node in self.nodes() for k in node["Resources"]})
            raise ValueError(f"{flag}={resources}: no node of the Ray cluster has them "
                             f"(its nodes have {kinds})")
        if room < count:
            raise ValueError(f"{flag}={resources}: the Ray cluster's nodes hold {room} of "
                             f"them at once, not the {count_flag}={count} that run together")
        return room

    def host_options(self, resources: Dict[str, float], max_restarts: int) -> dict:
        """The Ray actor options of a `CommandHost` that asks for `resources`."""
        resources = dict(resources)
        return dict(num_cpus=resources.pop("CPU", 0), num_gpus=resources.pop("GPU", 0),
                    resources=resources, max_restarts=max_restarts,
                    max_task_retries=-1 if max_restarts else 0, name=None)

    def kill(self, hosts) -> None:
        """Kills Ray actors `hosts` for good (their commands die with them)."""
        for host in hosts:
            try:
                self.ray.kill(host, no_restart=True)
            except Exception:  # pylint: disable=broad-except  # already gone
                pass

    def close(self) -> None:
        """Leaves the cluster: a Ray of its own shuts down, a joined one keeps running
        (never `ray stop`)."""
        if self.ray.is_initialized():
            self.ray.shutdown()
        if self._owns_ray:
            shutil.rmtree(self._temp_dir, ignore_errors=True)


class RayProcess:
    """A `backend.Process` run by a `CommandHost` Ray actor; its calls never block
    the supervisor (a pending poll is looked at, not waited for)."""

    def __init__(self, ray, name: str, host, started, relay: bool,
                 on_node: Callable[[str, str], None], on_lost: Callable[[str, str], None],
                 who: str = "launch"):
        """`on_node(name, address)` hears where the command runs once it started,
        `on_lost(name, why)` that its host was lost (its command then reads as
        SIGKILLed, `lost` says why); `who` names the command in its log lines."""
        self._ray, self._name, self._host, self._relay = ray, name, host, relay
        self._who = who
        self._on_node, self._on_lost = on_node, on_lost
        self._pending_start, self._pending_poll = started, None
        self.pid, self.returncode, self.lost = 0, None, None
        self.node, self.address, self._incarnation = None, None, None

    def _ready(self, ref) -> bool:
        return bool(self._ray.wait([ref], timeout=0)[0])

    def _lost(self, why: str) -> Optional[int]:
        self.lost, self.returncode = why, -signal.SIGKILL
        self._on_lost(self._name, why)
        return self.returncode

    def poll(self) -> Optional[int]:
        if self.returncode is not None:
            return self.returncode
        try:
            if self._pending_start is not None:
                if not self._ready(self._pending_start):
                    return None
                where = self._ray.get(self._pending_start)
                self._pending_start = None
                self.pid, self.node, self.address, self._incarnation = (
                    where["command_pid"], where["node_id"], where["ip"], where["incarnation"])
                logging.info("%s: %s runs on node %s %s (pid %d%s)", self._who, self._name,
                             where["ip"], self.node[:12], self.pid,
                             ", its warm spare" if where["promoted"] else "")
                self._on_node(self._name, where["ip"])
            if self._pending_poll is None:
                self._pending_poll = self._host.poll.remote()
            if not self._ready(self._pending_poll):
                return None
            state = self._ray.get(self._pending_poll)
        except self._ray.exceptions.RayActorError as error:
            return self._lost(type(error).__name__)
        self._pending_poll = None
        if self._relay and state["lines"]:
            sys.stderr.write("".join(state["lines"]))
            sys.stderr.flush()
        if state["incarnation"] != self._incarnation:
            return self._lost("its worker or its node; Ray restarted it")
        self.returncode = state["returncode"]
        return self.returncode

    def signal(self, signum: int) -> None:
        if self.returncode is None:  # a call to a host that is gone would be retried
            self._host.signal.remote(signum)

    def wait(self, timeout: float) -> Optional[int]:
        if self.returncode is None and self._pending_start is None:
            try:
                self.returncode = self._ray.get(self._host.wait.remote(timeout),
                                                timeout=timeout + 5)
            except self._ray.exceptions.RayActorError as error:
                return self._lost(type(error).__name__)
            except (self._ray.exceptions.RayError, TimeoutError):
                pass
        return self.returncode

    def kill(self, wait: bool = True) -> None:
        self.signal(signal.SIGKILL)
        if wait:
            self.wait(10.0)


def _warn_lost(name: str, why: str) -> None:
    logging.warning("launch: %s's Ray host was lost (%s)", name, why)


class LearnerAddresses:
    """Where each learner worker serves now, and which actors dial it.

    An actor's command names the address its worker was placed at
    (`--server=HOST:PORT`); `current()` rewrites it to the worker's address
    now, which `moved()` updates when a restarted worker runs on a node of
    another address (its port stays).
    """

    def __init__(self):
        self._placed: Dict[str, str] = {}  # a worker's first "HOST:PORT": its name
        self._now: Dict[str, str] = {}  # a worker's name: its "HOST:PORT" now
        self._dialling: Dict[str, str] = {}  # an actor's name: its worker's

    def placed(self, name: str, host: str, port: int) -> None:
        self._placed[f"{host}:{port}"] = name
        self._now[name] = f"{host}:{port}"

    def current(self, name: str, argv, spare_argv=None) -> tuple:
        """Process `name`'s `argv` and `spare_argv` with `--server=` at its worker's
        address now."""
        rewrite = lambda args: None if args is None else [self._rewrite(name, a) for a in args]
        return rewrite(argv), rewrite(spare_argv)

    def _rewrite(self, name: str, arg: str) -> str:
        worker = arg.startswith("--server=") and self._placed.get(arg[len("--server="):])
        if not worker:
            return arg
        self._dialling[name] = worker
        return f"--server={self._now[worker]}"

    def moved(self, name: str, host: str) -> List[str]:
        """Notes that worker `name` runs at `host` now; returns the actors to restart
        (none unless its address changed)."""
        if name not in self._now:
            return []
        before, _, port = self._now[name].rpartition(":")
        if before == host:
            return []
        self._now[name] = f"{host}:{port}"
        return [actor for actor, worker in self._dialling.items() if worker == name]


class RayBackend:
    """A `backend.Backend` of `CommandHost` Ray actors, one per supervised process."""

    name = "ray"

    def __init__(self, address: Optional[str], learner_resources: Dict[str, float],
                 actor_resources: Dict[str, float], max_restarts: int,
                 learner_workers: int = 1, reports: Optional[str] = None):
        """Connects to the cluster at `address` (None: starts a local Ray); Ray's own
        error reports go to the file `reports` (`ray_reports`; None: Ray prints them).

        Raises:
            ValueError: Ray is missing, `address` does not answer, or the nodes
                lack room for the learner's `learner_workers` workers or one
                actor (one line naming the flag).
        """
        self._session = RaySession(address, reports)
        self._ray = self._session.ray
        self._resources = {True: learner_resources, False: actor_resources}
        self._max_restarts = max_restarts
        self._hosts: Dict[str, object] = {}
        self._learners = LearnerAddresses()
        self._processes: Dict[str, RayProcess] = {}
        self._host_class = self._ray.remote(CommandHost)
        try:
            self._session.check_room("--learner_resources", learner_resources,
                                     learner_workers, "--learner_workers")
            self._session.check_room("--actor_resources", actor_resources, 1)
        except ValueError:
            self.close()
            raise

    def host(self, spec_name: str, primary: bool):
        """The Ray actor that runs `spec_name`'s command (made on first use)."""
        if spec_name not in self._hosts:
            options = self._session.host_options(self._resources[primary], self._max_restarts)
            if not primary:
                options["scheduling_strategy"] = "SPREAD"
            self._hosts[spec_name] = self._host_class.options(**options).remote()
        return self._hosts[spec_name]

    def place_learner(self, spec_name: str, root_dir: str, port: int) -> tuple:
        """Places a learner worker's host (by the learner's resources); returns its
        node's (address, port, all-reduce port): `port` (0: a free one there) and
        another free one. Raises ValueError when that node cannot write `root_dir`."""
        host = self.host(spec_name, primary=True)
        where = self._ray.get(host.node.remote(), timeout=_CALL_TIMEOUT_SECS)
        error = self._ray.get(host.check_writable.remote(root_dir), timeout=_CALL_TIMEOUT_SECS)
        if error:
            raise ValueError(error)
        free = self._ray.get(host.free_ports.remote(2), timeout=_CALL_TIMEOUT_SECS)
        self._learners.placed(spec_name, where["ip"], port or free[0])
        return where["ip"], port or free[0], free[1]

    def start(self, spec: ChildSpec) -> RayProcess:
        """Starts the command on its host (from the spare the host keeps, if ready);
        an actor's `--server` is its learner worker's address now."""
        host = self.host(spec.name, spec.primary)
        argv, spare_argv = self._learners.current(spec.name, spec.argv, spec.spare_argv)
        started = host.start.remote(argv, spec.log_path, os.getcwd(), spare_argv, spec.spares)
        process = RayProcess(self._ray, spec.name, host, started,
                             relay=spec.log_path is None, on_node=self._on_node,
                             on_lost=_warn_lost)
        self._processes[spec.name] = process
        return process

    def _on_node(self, name: str, address: str) -> None:
        """A learner worker back on a node of another address: its actors, which dial
        the old one, are stopped (SIGTERM), and their restart dials the new one."""
        for actor in self._learners.moved(name, address):
            process = self._processes.get(actor)
            if process is not None and process.returncode is None:
                logging.warning("launch: %s now runs at %s; restarting %s to dial it",
                                name, address, actor)
                process.signal(signal.SIGTERM)

    def tend(self, spec: ChildSpec, running: bool) -> None:
        pass  # each host keeps its own spare ready (`CommandHost.poll`)

    def drop_spares(self, wait: bool) -> None:
        refs = [host.drop_spare.remote(wait) for host in self._hosts.values()]
        if wait and refs:
            self._ray.wait(refs, num_returns=len(refs), timeout=10)

    def close(self) -> None:
        """Kills every host (their commands die with them); shuts a local Ray down."""
        self._session.kill(self._hosts.values())
        self._hosts = {}
        self._session.close()
