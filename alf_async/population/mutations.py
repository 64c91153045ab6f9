"""The settings population-based training may change, and how they change.

`--mutate=BINDING:SPEC` names a gin binding of a setting that a built run holds
in a variable and takes again at a resume (`Learner.mutable_settings`: the
learning rate, the entropy coefficient, the discount, PPO's clip ratio) and
its range: `uniform(LOW,HIGH)` or `log_uniform(LOW,HIGH)`. A member starts
at a value drawn from the range; explore multiplies it by one of the perturb
factors (x0.8 / x1.2), or with probability p draws it afresh, and keeps it
within the range.
"""

import dataclasses
import math
import random
import re
from typing import Dict, List, Sequence

# The last part of a binding -> the name the run reports it under (`trains_with`).
MUTABLE = ("learning_rate", "entropy_coeff", "clip_ratio", "discount")


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One mutable setting and its range.

    Attributes:
        binding: the gin binding (`alf_async.Learner.learning_rate`).
        setting: its name in the run's `trains_with` report (`learning_rate`).
        low, high: the range (inclusive).
        log: drawn uniformly in log space.
    """
    binding: str
    setting: str
    low: float
    high: float
    log: bool = False

    def sample(self, rng: random.Random) -> float:
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def explore(self, value: float, rng: random.Random, factors: Sequence[float],
                resample_probability: float) -> float:
        """`value` perturbed by one of `factors`, or drawn afresh; within the range."""
        if rng.random() < resample_probability:
            return self.sample(rng)
        return min(max(value * rng.choice(list(factors)), self.low), self.high)


_SPEC = re.compile(r"(uniform|log_uniform)\(\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)")


def parse_mutation(text: str) -> Mutation:
    """A `Mutation` of `BINDING:SPEC`.

    Raises:
        ValueError: a malformed flag, or a setting no run can change at a resume
            (one line naming it and the ones that can).
    """
    binding, _, spec = text.partition(":")
    setting = binding.strip().rsplit(".", 1)[-1]
    if setting not in MUTABLE:
        raise ValueError(f"--mutate={text}: {binding!r} is not a setting a run can change "
                         f"at a resume (mutable: {', '.join(MUTABLE)})")
    found = _SPEC.fullmatch(spec.strip())
    if not found:
        raise ValueError(f"--mutate={text}: SPEC must be uniform(LOW,HIGH) or "
                         f"log_uniform(LOW,HIGH), got {spec!r}")
    try:
        low, high = float(found.group(2)), float(found.group(3))
    except ValueError:
        raise ValueError(f"--mutate={text}: LOW and HIGH must be numbers") from None
    log = found.group(1) == "log_uniform"
    if not low < high or (log and low <= 0):
        raise ValueError(f"--mutate={text}: needs LOW < HIGH" + (" and LOW > 0" if log else ""))
    return Mutation(binding.strip(), setting, low, high, log)


def parse_mutations(texts: Sequence[str]) -> List[Mutation]:
    """Every `--mutate`; raises ValueError for none, or a setting given twice."""
    mutations = [parse_mutation(text) for text in texts]
    if not mutations:
        raise ValueError("--mutate: give at least one BINDING:SPEC")
    settings = [m.setting for m in mutations]
    twice = sorted({s for s in settings if settings.count(s) > 1})
    if twice:
        raise ValueError(f"--mutate: {', '.join(twice)} given more than once")
    return mutations


def bindings(mutations: Sequence[Mutation], values: Dict[str, float]) -> List[str]:
    """The `--gin_param` bindings that set `values` ({setting: value})."""
    return [f"{m.binding}={values[m.setting]!r}" for m in mutations]
