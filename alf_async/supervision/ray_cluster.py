"""A Ray cluster of simulated nodes on this host, for chaos runs and tests.

`SimulatedCluster` starts a head node that holds the learner's resource
(`{"learner": 1}`) and one node that holds the actors' (`{"actor": K}`),
each a raylet of its own on 127.0.0.1 (`ray.cluster_utils.Cluster`), under a
private temp dir. `replace_actor_node()` removes the actors' node and adds a
fresh one, as a lost machine and its replacement would: Ray moves the actor
processes' hosts there. A launch joins it with `--backend=ray
--address=ADDRESS` and `LEARNER_RESOURCES`, `ACTOR_RESOURCES`.

Thread-safety: used from one thread.
"""

import json
import os
import shutil
import tempfile
from typing import Tuple

from alf_async.supervision.ray_backend import import_ray

LEARNER_RESOURCES = {"learner": 1}
ACTOR_RESOURCES = {"actor": 1}
_NODE_MEMORY = dict(object_store_memory=100 * 1024 * 1024, num_cpus=1)


class SimulatedCluster:
    """A head node with the learner's resource and a node with the actors'."""

    def __init__(self, actors: int, temp_dir: str = ""):
        """Starts it; `temp_dir` holds Ray's sockets and logs (default: a new one, removed
        by `shutdown()`; keep it short: Unix socket paths end at 107 characters)."""
        self._owns_dir = not temp_dir
        self.temp_dir = temp_dir or tempfile.mkdtemp(prefix="alf_ray_cluster_")
        os.makedirs(self.temp_dir, exist_ok=True)
        os.environ["RAY_TMPDIR"] = self.temp_dir  # its address file too, not /tmp/ray's
        import_ray()
        from ray.cluster_utils import Cluster  # pylint: disable=import-outside-toplevel
        self._actors = actors
        self._cluster = Cluster(initialize_head=True, head_node_args=dict(
            include_dashboard=False, resources=LEARNER_RESOURCES, **_NODE_MEMORY))
        self.actor_node = self._add_actor_node()

    @property
    def address(self) -> str:
        """The head's GCS address (HOST:PORT), for `--address`."""
        return self._cluster.address

    def _add_actor_node(self):
        node = self._cluster.add_node(resources={"actor": self._actors}, **_NODE_MEMORY)
        self._cluster.wait_for_nodes()
        return node

    def replace_actor_node(self) -> Tuple[str, str]:
        """Removes the actors' node (its processes killed) and adds another; returns
        their node ids."""
        old = self.actor_node
        self._cluster.remove_node(old, allow_graceful=False)
        self.actor_node = self._add_actor_node()
        return old.node_id, self.actor_node.node_id

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
