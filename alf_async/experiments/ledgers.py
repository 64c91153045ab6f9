"""The chaos ledgers of an experiment's seeds (`python -m alf_async.experiment run
--runner=chaos`): read into the summary, and its markdown table.

A chaos seed's run directory holds the `ledger.json` that `alf_async.chaos`
wrote: faults by kind, restarts, what they cost, and where the target was
first reached, in wall seconds from the command. A cell's seeds without
faults are its fault-free baseline; the table compares the medians.
"""

import json
import os
from typing import Dict, List, Optional

import numpy as np

LEDGER_FILE = "ledger.json"
ZEROS = ("processes_left", "unreadable_checkpoints", "duplicated_unrolls", "hangs")


def read_ledger(run_dir: str) -> Optional[Dict]:
    """The run's chaos ledger, None for a run that is no chaos run (or not done)."""
    path = os.path.join(run_dir, LEDGER_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def wall_seconds_to_target(ledger: Optional[Dict]) -> Optional[float]:
    reached = ledger and ledger.get("reached")
    return reached["wall_seconds"] if reached else None


def _median(values: List[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _cell_medians(experiment: Dict, figure) -> Dict[str, Optional[float]]:
    """{cell: median of `figure(ledger)`} of the cells whose seeds have ledgers."""
    return {cell["name"]: _median([figure(s["ledger"]) for s in cell["seeds"]])
            for cell in experiment["cells"] if all(s.get("ledger") for s in cell["seeds"])}


def _medians_line(experiment: Dict, baseline: Optional[str], figure, what: str,
                  label: str = "Median wall seconds") -> str:
    """'LABEL WHAT: cell: m s (r x baseline); ...'."""
    medians = _cell_medians(experiment, figure)
    base = medians.get(baseline)
    parts = [f"{name}: {'—' if m is None else f'{m:.1f}'} s" + (
        f" ({m / base:.2f}x {baseline})" if base and m and name != baseline else "")
        for name, m in medians.items()]
    return f"{label} {what}: " + "; ".join(parts) + "."


def _faults(ledger: Dict) -> str:
    """'fired; env exceptions', with 'fired of scheduled' where the schedule had rounds
    (a ledger of before the count of scheduled faults has none)."""
    outside = sum(n for kind, n in ledger["faults"].items() if kind != "env_exception")
    scheduled = sum(ledger.get("scheduled", {}).values())
    fired = f"{outside} of {scheduled}" if scheduled else f"{outside}"
    return f"{fired}; {ledger['faults'].get('env_exception', 0)}"


def _restarts(ledger: Dict) -> str:
    learner = ledger["restarts"].get("learner", 0)
    actors = sum(n for child, n in ledger["restarts"].items() if child != "learner")
    return f"{learner}, {actors}; {ledger['env_restarts']}"


def _row(cell: str, seed: Dict) -> str:
    ledger = seed["ledger"]
    reached = ledger.get("reached")
    wall = "—" if not reached else f"{reached['wall_seconds']:.1f} ({reached['env_steps']:,})"
    zeros = ", ".join(str(ledger[k]) for k in ZEROS)
    cpu = ledger.get("cpu_seconds")  # none in a ledger of before it was counted
    return (f"| {cell} | {seed['seed']} | {ledger['wall_seconds']:.1f} | "
            f"{'—' if cpu is None else f'{cpu:.0f}'} | {wall} | "
            f"{_faults(ledger)} | {_restarts(ledger)} | "
            f"{ledger['seconds_lost']:.1f} | {zeros} | {ledger['longest_stop_secs']:.1f} |")


def chaos_table(experiment: Dict) -> str:
    """Markdown: every chaos seed's ledger, then each cell's median wall seconds (of
    the whole command, and to the target) against the fault-free cell's ('' for an
    experiment without ledgers)."""
    medians = _cell_medians(experiment, wall_seconds_to_target)
    if not medians:
        return ""
    rows = ["| cell | seed | wall s | CPU s (machine) | wall s to target (env steps) | faults (outside, of "
            "scheduled; env exceptions) | restarts (learner, actors; env rebuilds) | s without training "
            "after learner restarts | processes left, unreadable checkpoints, duplicated "
            "unrolls, hangs | longest stop s |", "|---|---:|---:|---:|---:|---|---|---:|---|---:|"]
    rows += [_row(cell["name"], seed) for cell in experiment["cells"] if cell["name"] in medians
             for seed in cell["seeds"]]
    baseline = next((c["name"] for c in experiment["cells"] if c["name"] in medians
                     and not any(s["ledger"]["faults"] for s in c["seeds"])), None)
    lines = rows + ["", _medians_line(
        experiment, baseline, lambda ledger: ledger["wall_seconds"], "of the whole command"),
        "", _medians_line(experiment, baseline, wall_seconds_to_target,
                          "from the command to the target")]
    if any(_cell_medians(experiment, lambda ledger: ledger.get("cpu_seconds")).values()):
        lines += ["", _medians_line(experiment, baseline, lambda ledger: ledger.get(
            "cpu_seconds"), "the machine's cores were busy", label="Median CPU seconds")]
    return "\n".join(lines)
