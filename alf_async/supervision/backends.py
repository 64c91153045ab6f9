"""The launch's backends by name: `--backend=NAME` makes `BACKENDS[NAME](settings)`.

A new backend is one module implementing `backend.Backend` (start, tend,
drop_spares, close, place_learner) and one entry here; the launch and the
supervisor know nothing else of it. Like `batches.registry.SOURCES`.
"""

import dataclasses
import json
from typing import Callable, Dict, Optional

from alf_async.supervision.backend import Backend
from alf_async.supervision.local import LocalBackend


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


BACKENDS: Dict[str, Callable[[LaunchSettings], Backend]] = {
    "local": _local,  # subprocesses of the launch on this host
    "ray": _ray,  # Ray actors on a Ray cluster (imports Ray only when chosen)
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
    made = BACKENDS[name](settings)
    missing = [member for member in ("name", "start", "tend", "drop_spares", "close",
                                     "place_learner") if not hasattr(made, member)]
    if missing:
        raise TypeError(f"backend {name!r} lacks {', '.join(missing)} of backend.Backend")
    return made
