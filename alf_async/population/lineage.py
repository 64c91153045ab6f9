"""A population's lineage (`ROOT/pbt/lineage.jsonl`), its report, and a member's schedule.

One JSON line per member per generation, written when the member is ready:

    {"member": 2, "generation": 3, "parent": 0, "settings": {"learning_rate": 1e-3},
     "score": 312.5, "env_steps": 61440, "weights": "ab12..."}

`parent` is the member whose checkpoint this member continued in that
generation's interval (its own index: none copied), `settings` what it
trained with (checked against what it reported), `score` its last-N average
return at the ready point.
"""

import json
import os
from typing import List, Optional

from alf_async import events, extras
from alf_async.runs.curves import load_curve, save_figure
from alf_async.runs import layout

PBT_DIR = "pbt"
LINEAGE_FILE = "lineage.jsonl"


def lineage_path(root_dir: str) -> str:
    return os.path.join(root_dir, PBT_DIR, LINEAGE_FILE)


def append(root_dir: str, record: dict) -> None:
    """Appends one member's generation record (a line, flushed to disk)."""
    os.makedirs(os.path.join(root_dir, PBT_DIR), exist_ok=True)
    with open(lineage_path(root_dir), "a") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())


def read(root_dir: str) -> List[dict]:
    """Every record, in the order written (a line torn by a crash is skipped)."""
    try:
        with open(lineage_path(root_dir)) as f:
            return events.parse_lines(f.read().splitlines())
    except FileNotFoundError:
        return []


def ancestry(records: List[dict], member: int) -> List[dict]:
    """The records of the intervals that trained `member`'s final weights, oldest
    first: its last generation's, then its parent's the generation before, ..."""
    by_key = {(r["member"], r["generation"]): r for r in records}
    generations = [r["generation"] for r in records if r["member"] == member]
    if not generations:
        raise ValueError(f"member {member} is not in the lineage "
                         f"(members: {sorted({r['member'] for r in records})})")
    chain, at, generation = [], member, max(generations)
    while (at, generation) in by_key:
        record = by_key[(at, generation)]
        chain.append(record)
        at, generation = record["parent"], generation - 1
    return chain[::-1]


def table(records: List[dict]) -> str:
    """Markdown: one row per member and generation (settings, parent, score)."""
    settings = sorted({s for r in records for s in r["settings"]})
    rows = ["| member | generation | parent | " + " | ".join(settings) + " | score | env steps |",
            "|" + "---|" * (len(settings) + 5)]
    for r in sorted(records, key=lambda r: (r["member"], r["generation"])):
        score = "-" if r["score"] is None else f"{r['score']:.1f}"
        parent = "own" if r["parent"] == r["member"] else str(r["parent"])
        rows.append(f"| {r['member']} | {r['generation']} | {parent} | " +
                    " | ".join(f"{r['settings'][s]:.4g}" for s in settings) +
                    f" | {score} | {r['env_steps']} |")
    return ("\n".join(rows) + "\n\nparent: the member whose checkpoint this generation "
            "continued from ('own': its own); score: its run's final score at the ready "
            f"point (`{layout.RESULT_FILE}`), as the controller ranked it, the curves' point "
            "there.\n")


def schedule_text(chain: List[dict]) -> str:
    """`learning_rate 0.003369 -> 0.004043; clip_ratio ...`: each setting's value per
    generation of `chain` (oldest first)."""
    settings = sorted({s for r in chain for s in r["settings"]})
    return "; ".join(f"{s} " + " -> ".join(f"{r['settings'][s]:.4g}" for r in chain)
                     for s in settings)


def plot(root_dir: str, records: List[dict], path: str) -> None:
    """Every member's return over env steps, each exploit marked where it landed."""
    plt = extras.pyplot("python -m alf_async.pbt report", "experiment")
    fig, ax = plt.subplots(figsize=(9, 5))
    for member in sorted({r["member"] for r in records}):
        curve = load_curve(os.path.join(root_dir, f"member_{member}"))
        line, = ax.plot(curve["env_steps"], curve["value"], label=f"member {member}")
        for r in records:
            if r["member"] == member and r["parent"] != member:
                start = _interval_start(records, r)
                ax.axvline(start, color=line.get_color(), alpha=0.3, linestyle="--")
                ax.annotate(f"from {r['parent']}", (start, _at(curve, start)),
                            color=line.get_color(), fontsize=7)
    ax.set(xlabel="env steps", ylabel="average return (dashed: an exploit)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(plt, fig, path)


def _interval_start(records: List[dict], record: dict) -> int:
    before = [r["env_steps"] for r in records
              if r["member"] == record["parent"] and r["generation"] == record["generation"] - 1]
    return before[0] if before else 0


def _at(curve, env_steps: int) -> Optional[float]:
    index = int(min(max(curve["env_steps"].searchsorted(env_steps), 0),
                    len(curve["value"]) - 1))
    return float(curve["value"][index]) if len(curve["value"]) else 0.0


def write_report(root_dir: str) -> str:
    """Writes `ROOT/pbt/report.md` (the table) and `ROOT/pbt/curves.png`; returns the
    table. Raises ValueError where the root holds no lineage."""
    records = read(root_dir)
    if not records:
        raise ValueError(f"{lineage_path(root_dir)}: no lineage (is it a pbt root?)")
    text = table(records)
    with open(os.path.join(root_dir, PBT_DIR, "report.md"), "w") as out:
        out.write(text)
    plot(root_dir, records, os.path.join(root_dir, PBT_DIR, "curves.png"))
    return text
