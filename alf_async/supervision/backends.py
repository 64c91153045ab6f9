"""The backends by name: where the launch's processes, and the many-runs commands' runs,
go. `--backend=NAME` makes `BACKENDS[NAME].launch(settings)` for `launch` (and
`chaos`), `BACKENDS[NAME].placement(settings)` for `experiment`, `tune` and `pbt`.

A new backend is one `backend.Backend` (start, tend, drop_spares, close,
place_learner), one `placement.Placement`, and one entry here; the launch, the
supervisor and the many-runs commands know nothing else of it. Like
`batches.registry.SOURCES`.
"""

import dataclasses
import json
from typing import Callable, Dict, Optional

from absl import flags

from alf_async.supervision.backend import Backend
from alf_async.supervision.local import LocalBackend
from alf_async.supervision.placement import LocalPlacement, Placement, RayPlacement


def parse_resources(flag: str, text: str) -> Dict[str, float]:
    """The JSON object of Ray resources `text`; ValueError naming `flag` otherwise."""
    try:
        resources = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{flag} must be a JSON object, got {text!r} ({error.msg})") from None
    if not isinstance(resources, dict) or not all(
            isinstance(v, (int, float)) and v >= 0 for v in resources.values()):
        raise ValueError(f"{flag} must map resource names to amounts >= 0, got {text!r}")
    return resources


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    """What a backend is made from (the launch's flags).

    Attributes:
        address: a cluster to join (`--address`; None: none, or one of its own).
        learner_resources: each learner worker's resources (`--learner_resources`).
        actor_resources: each actor process's (`--actor_resources`).
        max_restarts: restarts the launch allows each process (`--max_restarts`).
        learner_workers: N, the learner's worker processes (`--learner_workers`).
        reports: where a cluster's own error reports go (None: where it prints them).
    """
    address: Optional[str] = None
    learner_resources: Dict[str, float] = dataclasses.field(default_factory=dict)
    actor_resources: Dict[str, float] = dataclasses.field(default_factory=dict)
    max_restarts: int = 5
    learner_workers: int = 1
    reports: Optional[str] = None


def _local(settings: LaunchSettings) -> Backend:
    del settings  # subprocesses of this host: nothing to join or place by
    return LocalBackend()


def _ray(settings: LaunchSettings) -> Backend:
    from alf_async.supervision import ray_backend  # pylint: disable=import-outside-toplevel
    return ray_backend.RayBackend(settings.address, settings.learner_resources,
                                  settings.actor_resources, settings.max_restarts,
                                  settings.learner_workers, reports=settings.reports)


@dataclasses.dataclass(frozen=True)
class PlacementSettings:
    """What a many-runs command's placement is made from (its flags).

    Attributes:
        address: a Ray cluster to join (`--address`; None: one of its own).
        resources: what each run asks of its node (`--<unit>_resources`).
        out_dir: the folder every node that runs one must write (`--out`).
        retries: times a lost run starts again (`--<unit>_retries`).
        unit: what one run is, for lines ("seed", "member", "worker").
        command: the caller's name, for lines.
    """
    address: Optional[str] = None
    resources: Dict[str, float] = dataclasses.field(default_factory=dict)
    out_dir: str = "."
    retries: int = 0
    unit: str = "seed"
    command: str = "experiment"


def _local_placement(settings: PlacementSettings) -> Placement:
    return LocalPlacement(settings.retries)


def _ray_placement(settings: PlacementSettings) -> Placement:
    return RayPlacement(settings.address, settings.resources, settings.out_dir,
                        settings.retries, settings.unit, settings.command)


@dataclasses.dataclass(frozen=True)
class BackendKind:
    """One backend: how the launch's processes and the many-runs commands' runs go there."""
    launch: Callable[[LaunchSettings], Backend]
    placement: Callable[[PlacementSettings], Placement]


BACKENDS: Dict[str, BackendKind] = {
    "local": BackendKind(_local, _local_placement),  # subprocesses on this host
    "ray": BackendKind(_ray, _ray_placement),  # Ray actors (imports Ray only when chosen)
}


def make_backend(name: str, settings: LaunchSettings) -> Backend:
    """The backend registered as `name`, made from `settings`.

    Raises:
        ValueError: an unknown name (names the registered ones), or what the
            backend raised (a cluster that does not answer, ...).
        TypeError: the made object lacks a member of `backend.Backend`.
    """
    if name not in BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(sorted(BACKENDS))}, got {name!r}")
    return _checked(name, BACKENDS[name].launch(settings), "backend.Backend",
                    ("name", "start", "tend", "drop_spares", "close", "place_learner"))


def make_placement(name: str, settings: PlacementSettings) -> Placement:
    """The placement registered as `name`, made from `settings`; raises as `make_backend`."""
    if name not in BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(sorted(BACKENDS))}, got {name!r}")
    return _checked(name, BACKENDS[name].placement(settings), "placement.Placement",
                    ("name", "nodes", "retries", "capacity", "tf_threads", "start", "forget",
                     "close"))


def _checked(name: str, made, interface: str, members):
    """`made`, or TypeError naming the members of `interface` it lacks."""
    missing = [member for member in members if not hasattr(made, member)]
    if missing:
        raise TypeError(f"backend {name!r} lacks {', '.join(missing)} of {interface}")
    return made


def define_placement_flags(unit: str) -> None:
    """Registers `--backend`, `--address`, `--<unit>_resources` and `--<unit>_retries`
    as flags of the calling command (`unit`: what one placed run is, e.g. "seed")."""
    flags.DEFINE_enum("backend", "local", sorted(BACKENDS), f"Where each {unit} runs: a "
                      f"subprocess of this host, or a node of a Ray cluster (pip install "
                      f"'.[ray]'; its output folder must be storage every node shares).")
    flags.DEFINE_string("address", None, "--backend=ray: the Ray cluster's head (HOST:PORT "
                        "or auto); unset: a Ray of its own on this host, on loopback.")
    flags.DEFINE_string(f"{unit}_resources", '{"CPU": 1}', f"--backend=ray: what each {unit} "
                        f"asks of its node (JSON of Ray resources); as many run at once as "
                        f"the cluster holds.")
    flags.DEFINE_integer(f"{unit}_retries", 3, f"Times a {unit} whose node was lost (Ray) is "
                         f"started again on another node (it resumes from its checkpoint); a "
                         f"tune worker that dies is started again as often, here too.")


def placement_from_flags(unit: str, out_dir: str, command: str) -> Placement:
    """The placement the flags ask for (`command` names the caller in its log lines).
    Raises ValueError (one line) on a bad setting."""
    values = flags.FLAGS
    if values.backend == "local" and values.address:
        raise ValueError("--address needs --backend=ray")
    return make_placement(values.backend, PlacementSettings(
        values.address, parse_resources(f"--{unit}_resources", values[f"{unit}_resources"].value),
        out_dir, values[f"{unit}_retries"].value, unit, command))
