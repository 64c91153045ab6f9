"""A population's settings (the `pbt` command's flags), checked before anything starts.

Light on purpose (no TensorFlow): the command refuses bad input in a moment.
"""

import dataclasses
from typing import Sequence

from alf_async.population.mutations import Mutation


@dataclasses.dataclass(frozen=True)
class PbtSettings:
    """A population's settings (the `pbt` command's flags).

    Attributes:
        root_dir: ROOT: members in `ROOT/member_<i>`, the lineage in `ROOT/pbt/`.
        gin_files, gin_params: every member's.
        mutations: the mutable settings and their ranges.
        population: P, members.
        interval_env_steps: K, env steps between ready points.
        generations: G, intervals (a member's budget: G * K env steps).
        quantile: the bottom share that exploits the top share.
        factors: explore's perturbations (x0.8 / x1.2).
        resample_probability: explore draws a setting afresh this often.
        seed: seeds the draws and the members' runs (member i: seed + i).
        parallel: members trained at once.
        tf_threads: each member's --tf_threads.
        exploit: False: no copies and no perturbations (a random search).
    """
    root_dir: str
    gin_files: Sequence[str]
    gin_params: Sequence[str]
    mutations: Sequence[Mutation]
    population: int
    interval_env_steps: int
    generations: int
    quantile: float = 0.25
    factors: Sequence[float] = (0.8, 1.2)
    resample_probability: float = 0.25
    seed: int = 0
    parallel: int = 1
    tf_threads: int = 1
    exploit: bool = True


def check(settings: PbtSettings) -> None:
    """Raises ValueError naming a bad setting."""
    for name, least in (("population", 2), ("interval_env_steps", 1), ("generations", 1),
                        ("parallel", 1)):
        if getattr(settings, name) < least:
            raise ValueError(f"--{name} must be >= {least}, got {getattr(settings, name)}")
    if not 0.0 < settings.quantile <= 0.5:
        raise ValueError(f"--quantile must be in (0, 0.5], got {settings.quantile}")
    if settings.exploit and int(settings.population * settings.quantile) < 1:
        raise ValueError(f"--population={settings.population} --quantile={settings.quantile:g}: "
                         f"no member is in the bottom quantile, so none would ever exploit "
                         f"(give --quantile >= {1 / settings.population:g}, or more members)")
    if not settings.factors or min(settings.factors) <= 0:
        raise ValueError(f"--perturb_factors must be numbers above 0, got "
                         f"{','.join(map(str, settings.factors))}")
    if not 0.0 <= settings.resample_probability <= 1.0:
        raise ValueError(f"--resample_probability must be in [0, 1], got "
                         f"{settings.resample_probability}")


def parse_factors(values: Sequence[str]) -> Sequence[float]:
    """`--perturb_factors`' values as numbers (ValueError naming the flag)."""
    try:
        return tuple(float(value) for value in values)
    except ValueError:
        raise ValueError(f"--perturb_factors must be numbers above 0, got "
                         f"{','.join(values)}") from None
