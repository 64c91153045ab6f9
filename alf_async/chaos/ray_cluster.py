"""A Ray cluster of simulated nodes on this host, for chaos runs and tests.

`SimulatedCluster` starts a head node (the GCS, no resources for the run), a
node that holds the learner's resource (`{"learner": 1}`) and one or more
that hold the actors' (K actors over N nodes: `{"actor": ceil(K / N)}` each,
so that Ray spreads them and a lost node takes only its share), each a
raylet of its own under a private temp dir (`ray.cluster_utils.Cluster`).
Every node but the head has an address of its own on the loopback network
(127.0.0.2, 127.0.0.3, ...), as machines of a cluster would.
`replace_actor_node()` and `replace_learner_node()` remove a node and add a
fresh one with the same resources (at a new address), as a lost machine and
its replacement would: Ray moves the processes' hosts there. The head
declares a node dead after `HEALTH_CHECK` (3 missed checks 1 s apart, ~3 s;
Ray's default is 5 x 3 s), a setting of the cluster that a real one sets
with `ray start --head --system-config=...`. A launch joins it with
`--backend=ray --address=ADDRESS` and `LEARNER_RESOURCES`, `ACTOR_RESOURCES`.

Thread-safety: used from one thread.
"""

import json
import os
import shutil
import tempfile
from typing import List, Tuple

from alf_async.supervision import ray_site
from alf_async.supervision.ray_backend import import_ray

_HOSTS = 64  # node addresses 127.0.0.2 ... 127.0.0.64, the replacements included
LEARNER_RESOURCES = {"learner": 1}
ACTOR_RESOURCES = {"actor": 1}
_NODE_MEMORY = dict(object_store_memory=100 * 1024 * 1024, num_cpus=1)
HEALTH_CHECK = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}


class SimulatedCluster:
    """A head node, a node with the learner's resource and nodes with the actors'."""

    def __init__(self, actors: int, temp_dir: str = "", actor_nodes: int = 1):
        """Starts it; `temp_dir` holds Ray's sockets and logs (default: a new one, removed
        by `shutdown()`; keep it short: Unix socket paths end at 107 characters);
        `actor_nodes` nodes hold the actors' resource."""
        self._owns_dir = not temp_dir
        self.temp_dir = temp_dir or tempfile.mkdtemp(prefix="alf_ray_cluster_")
        os.makedirs(self.temp_dir, exist_ok=True)
        os.environ["RAY_TMPDIR"] = self.temp_dir  # its address file too, not /tmp/ray's
        import_ray()
        # The nodes' addresses bypass the closed proxy of `LOCAL_RAY_ENV` (gRPC, so
        # Reverb, takes http_proxy too, and its no_proxy knows no address ranges).
        hosts = [f"127.0.0.{i}" for i in range(2, _HOSTS + 1)]
        os.environ["no_proxy"] = ",".join([os.environ.get("no_proxy", "127.0.0.1"), *hosts])
        from ray.cluster_utils import Cluster  # pylint: disable=import-outside-toplevel
        self._per_node = {"actor": -(-actors // actor_nodes)}  # K / N, rounded up
        self._last_host = 1  # the head's: 127.0.0.1
        with ray_site.pydantic_hidden():
            self._cluster = Cluster(initialize_head=True, head_node_args=dict(
                include_dashboard=False, _system_config=HEALTH_CHECK, **_NODE_MEMORY))
        self.learner_node = self._add_node(LEARNER_RESOURCES)
        self.actor_nodes = [self._add_node(self._per_node) for _ in range(actor_nodes)]

    @property
    def address(self) -> str:
        """The head's GCS address (HOST:PORT), for `--address`."""
        return self._cluster.address

    def _add_node(self, resources: dict):
        """A node with `resources`, at the next loopback address."""
        self._last_host += 1
        if self._last_host > _HOSTS:
            raise RuntimeError(f"SimulatedCluster: more than {_HOSTS - 1} nodes added")
        with ray_site.pydantic_hidden():
            node = self._cluster.add_node(resources=resources, **_NODE_MEMORY,
                                          node_ip_address=f"127.0.0.{self._last_host}")
        self._cluster.wait_for_nodes()
        return node

    def _replace(self, node, resources: dict):
        self._cluster.remove_node(node, allow_graceful=False)
        return self._add_node(resources)

    def replace_actor_node(self, index: int = 0) -> Tuple[str, str]:
        """Removes actor node `index` (its processes killed) and adds another; returns
        their node ids."""
        old = self.remove_actor_node(index)
        return old.node_id, self.add_actor_node(index).node_id

    def remove_actor_node(self, index: int):
        """Removes actor node `index` (its processes killed) and returns it; the place
        stays empty until `add_actor_node(index)`."""
        old = self.actor_nodes[index]
        self._cluster.remove_node(old, allow_graceful=False)
        return old

    def add_actor_node(self, index: int):
        """Adds an actor node, at the next address, in place `index`; returns it."""
        self.actor_nodes[index] = self._add_node(self._per_node)
        return self.actor_nodes[index]

    def actor_node_pids(self) -> List[int]:
        """The raylet's pid of each actor node (the processes it hosts descend from it)."""
        return [node.all_processes["raylet"][0].process.pid for node in self.actor_nodes]

    def replace_learner_node(self) -> Tuple[str, str]:
        """Removes the learner's node (its processes killed) and adds another at a new
        address; returns their addresses."""
        old = self.learner_node
        self.learner_node = self._replace(old, LEARNER_RESOURCES)
        return old.node_ip_address, self.learner_node.node_ip_address

    def launch_flags(self) -> list:
        """The launch's flags that join this cluster."""
        return ["--backend=ray", f"--address={self.address}",
                f"--learner_resources={json.dumps(LEARNER_RESOURCES)}",
                f"--actor_resources={json.dumps(ACTOR_RESOURCES)}"]

    def shutdown(self) -> None:
        """Stops every node (never `ray stop`, which would stop every Ray of the user)."""
        self._cluster.shutdown()
        if self._owns_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
