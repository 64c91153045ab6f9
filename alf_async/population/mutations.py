"""The settings population-based training may change, and how they change.

`--mutate=BINDING:SPEC` names any gin binding of a number, or a macro (a member
restarts its process every interval, so the rebuild takes the new value), and its range:
`uniform(LOW,HIGH)` or `log_uniform(LOW,HIGH)`; integer bounds keep it an
integer (`alf_async.Learner.num_epochs:uniform(2,8)`). A binding whose change
would change a shape the members' checkpoints hold (a network's size, B, T) is
refused before anything starts (`population.shapes`). A member starts at a
value drawn from the range; explore multiplies it by one of the perturb
factors (x0.8 / x1.2), or with probability p draws it afresh, and keeps it
within the range.

What a member's run reports it trains with (`trains_with`) names a setting
the learner holds in a variable by its short name, read from that variable
(`Learner.mutable`: the learning rate, the entropy coefficient, the
discount, PPO's clip ratio); any other by its binding, read from the value gin
really passed (`config.applied_values`).
"""

import dataclasses
import math
import random
import re
from typing import Dict, List, Sequence

# Settings a built run holds in a variable (`Learner.mutable`): reported under
# the binding's last part, read from the live variable.
IN_VARIABLES = ("learning_rate", "entropy_coeff", "clip_ratio", "discount")


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One mutable setting and its range.

    Attributes:
        binding: the gin binding (`alf_async.Learner.learning_rate`).
        setting: its name in the run's `trains_with` report (`learning_rate` for
            one in `IN_VARIABLES`, else the binding).
        low, high: the range (inclusive).
        log: drawn uniformly in log space.
        integer: its values are integers (both bounds were).
    """
    binding: str
    setting: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def sample(self, rng: random.Random) -> float:
        if self.log:
            return self._kept(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return rng.randint(int(self.low), int(self.high)) if self.integer else \
            rng.uniform(self.low, self.high)

    def explore(self, value: float, rng: random.Random, factors: Sequence[float],
                resample_probability: float) -> float:
        """`value` perturbed by one of `factors`, or drawn afresh; within the range."""
        if rng.random() < resample_probability:
            return self.sample(rng)
        return self._kept(value * rng.choice(list(factors)))

    def _kept(self, value: float) -> float:
        """`value` within the range (and rounded, for an integer setting)."""
        value = min(max(value, self.low), self.high)
        return int(round(value)) if self.integer else value


_SPEC = re.compile(r"(uniform|log_uniform)\(\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)")
_BINDING = re.compile(r"([\w.]+/)*[A-Za-z_][\w.]*")  # [scope/]selector.param, or a macro
_INTEGER = re.compile(r"[+-]?\d+")


def parse_mutation(text: str) -> Mutation:
    """A `Mutation` of `BINDING:SPEC`.

    Raises:
        ValueError: a malformed flag (one line naming it).
    """
    binding, _, spec = (part.strip() for part in text.partition(":"))
    if not _BINDING.fullmatch(binding):
        raise ValueError(f"--mutate={text}: BINDING must be a gin binding "
                         f"(CONFIGURABLE.PARAMETER, e.g. alf_async.Learner.num_epochs, or "
                         f"a macro), got {binding!r}")
    last = binding.rsplit(".", 1)[-1]
    found = _SPEC.fullmatch(spec)
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
    integer = all(_INTEGER.fullmatch(bound) for bound in found.group(2, 3))
    return Mutation(binding, last if last in IN_VARIABLES else binding, low, high, log,
                    integer)


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
