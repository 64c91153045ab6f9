"""Timing a step function: its rate, its CPU time per unit, two of them in alternation.

No flags and no TensorFlow: `toolkit` re-exports these for the tools, and
tests import them on their own.
"""

import dataclasses
import os
import time
from typing import Callable, Dict, Sequence


def rate(step_fn: Callable[[], int], duration: float, warmup: float) -> float:
    """Frames/s of `step_fn() -> frames`, after `warmup` seconds."""
    deadline = time.perf_counter() + warmup
    while time.perf_counter() < deadline:
        step_fn()
    frames, start = 0, time.perf_counter()
    while time.perf_counter() - start < duration:
        frames += step_fn()
    return frames / (time.perf_counter() - start)


def cpu_seconds(pids: Sequence[int] = ()) -> float:
    """CPU time (user + system) of this process and of processes `pids` (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def rate_and_cpu(step_fn: Callable[[], int], duration: float, warmup: float,
                 pids: Sequence[int] = ()):
    """`(frames/s, CPU microseconds per frame)` of `step_fn`, CPU counted over this
    process and `pids`."""
    rate(step_fn, 0.0, warmup)
    cpu = cpu_seconds(pids)
    frames_per_sec = rate(step_fn, duration, 0.0)
    return frames_per_sec, (cpu_seconds(pids) - cpu) * 1e6 / (frames_per_sec * duration)


@dataclasses.dataclass
class Tally:
    """What one side of `alternating_rates` did while measured."""

    units: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    counts: Dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Units (frames, optimizer steps) per second."""
        return self.units / self.seconds

    @property
    def cpu_us_per_unit(self) -> float:
        return self.cpu_seconds * 1e6 / self.units

    def count_rate(self, name: str) -> float:
        """Increase per second of counter `name` while this side was measured."""
        return self.counts[name] / self.seconds


def alternating_rates(sides: Dict[str, Callable[[], int]], duration: float, settle: float,
                      slices: int, counters: Callable[[], Dict[str, float]] = dict,
                      clock: Callable[[], float] = time.perf_counter,
                      cpu: Callable[[], float] = cpu_seconds) -> Dict[str, Tally]:
    """Measures each side's `step() -> units` in `slices` alternating slices.

    Slice k runs every side in turn: `settle` seconds unmeasured (what the
    side before it left behind, queues filled or drained, settles), then
    `duration / slices` seconds measured. A machine whose speed drifts during
    the run then slows every side alike, so their ratio holds steadier than
    that of figures measured one after the other.

    Args:
        sides: name -> step function returning the units it did.
        counters: returns monotonic counts (e.g. replay inserts); each side's
            `Tally.counts` holds their increase while it was measured.
        clock, cpu: seconds of wall time and of CPU time (tests pass fakes).

    Returns:
        name -> `Tally` over its measured slices.
    """
    tallies = {name: Tally() for name in sides}
    for _ in range(slices):
        for name, step in sides.items():
            deadline = clock() + settle
            while clock() < deadline:
                step()
            tally, before, cpu_start, start = tallies[name], counters(), cpu(), clock()
            while clock() - start < duration / slices:
                tally.units += step()
            tally.seconds += clock() - start
            tally.cpu_seconds += cpu() - cpu_start
            for key, value in counters().items():
                tally.counts[key] = tally.counts.get(key, 0.0) + value - before[key]
    return tallies
