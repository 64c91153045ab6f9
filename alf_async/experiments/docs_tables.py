"""The docs' result tables, generated from the committed summaries in `docs/results/`.

Each `docs/results/<name>.json` is an experiment report's `summary.json` (see
`report.py`) plus a `source` entry: `"alf_async.experiment"` with the command
that made it, or `"by hand"` for results measured before the experiment
command existed (their seeds carry the figures the trainer logged, no curves;
an optional `curves` entry names a PNG under `docs/`).
`docs/results/catalog.json` names the shipped configs' results (by task, with
the field's reference figure); every other result is an ablation or tuning
history. `python -m alf_async.experiment docs` rewrites the README's configs
table (shipped results only), `docs/results.md` (a summary table, then the
shipped results by task) and `docs/experiments/ablations.md` from them, and
draws `docs/results/<name>.png` from an experiment's curves where it is
missing; `check()` says whether the text is up to date.
"""

import glob
import json
import os
import re
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from alf_async.experiments import ledgers, report
from alf_async.runs import layout

BEGIN, END = "<!-- results-table: configs -->", "<!-- /results-table -->"
CATALOG = "catalog.json"  # the shipped results, by task, with the field's figures


def load_results(results_dir: str) -> List[Tuple[str, Dict]]:
    """`(name, summary)` of every `*.json` in `results_dir`, by name."""
    results = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        if os.path.basename(path) == CATALOG:
            continue
        with open(path) as f:
            results.append((os.path.splitext(os.path.basename(path))[0], json.load(f)))
    return results


def _median(values: List[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _lowest(values: List[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _labelled_cells(name: str, summary: Dict):
    """`(label, cell)` of every cell: the label names the cell where a summary has
    several, by its experiment's name where those differ (`report DIR DIR ...`),
    after the result's name where it is not its config's; a single cell
    published under another name than its config's gets that name."""
    experiments = summary["experiments"]
    cells = [(e.get("name"), c) for e in experiments for c in e["cells"]]
    if len(cells) == 1:
        config = os.path.splitext(summary["config"] or name)[0]
        return [("" if config == name else f" ({name})", cells[0][1])]
    by_experiment = len(experiments) > 1
    config = os.path.splitext(summary["config"] or name)[0]
    prefix = "" if config == name or by_experiment else f"{name}, "  # (ppo_chaos_ray, faults=all)
    return [(f" ({prefix}{experiment if by_experiment else cell['name']})", cell)
            for experiment, cell in cells]


def load_catalog(results_dir: str) -> List[Dict]:
    """The shipped results, in the Results page's order: `{result, task, reference}`.

    Raises:
        ValueError: the catalog names a result that `results_dir` lacks.
    """
    with open(os.path.join(results_dir, CATALOG)) as f:
        shipped = json.load(f)["shipped"]
    missing = [entry["result"] for entry in shipped
               if not os.path.exists(os.path.join(results_dir, entry["result"] + ".json"))]
    if missing:
        raise ValueError(f"{CATALOG} names results that docs/results/ lacks: {missing}")
    return shipped


def _shipped(results: List[Tuple[str, Dict]], catalog: List[Dict]) -> List[Tuple[str, Dict]]:
    by_name = dict(results)
    return [(entry["result"], by_name[entry["result"]]) for entry in catalog]


def configs_table(results: List[Tuple[str, Dict]], baselines: Sequence[str] = ()) -> str:
    """Markdown: one row per cell of every results file given; `baselines` (result
    names) are marked as deliberate baselines."""
    rows = ["| config | env | target, budget | reached | env steps to target (median) | "
            "seconds (median) | lowest last-25 % | source |",
            "|---|---|---|---|---:|---:|---:|---|"]
    for name, summary in results:
        for suffix, cell in _labelled_cells(name, summary):
            seeds = cell["seeds"]
            reached = sum(s["env_steps_to_target"] is not None for s in seeds)
            budget = cell.get("budget")
            label = f"`{summary['config']}`{suffix}"
            label += " (deliberate baseline)" if name in baselines else ""
            rows.append(
                f"| [{label}](docs/results.md#{name}) | {cell.get('env', '—')} | "
                f"{cell['target']:g}, {report.steps(budget)} | {reached}/{len(seeds)} | "
                f"{report.steps(_median([s['env_steps_to_target'] for s in seeds]))} | "
                f"{report.number(_median([s['seconds_to_target'] for s in seeds]))} | "
                f"{report.number(_lowest([s.get('last25_min') for s in seeds]))} | "
                f"{'experiment' if summary['source'] != 'by hand' else 'by hand'} |")
    return "\n".join(rows)


_ABOUT = ("Generated by `python -m alf_async.experiment docs` from `docs/results/*.json`; "
          "do not edit by hand. Seeds are ones the configs were never tuned on. Seconds: "
          "from the run's first summary event (after imports and building) for "
          "experiment results; as the trainer logged them (from the end of compiling) "
          "for results made by hand. Last-25 %: the lowest average return over the last "
          "quarter of the run.")


# The cells of a comparison, each in a row of its own, its baseline first: a chaos
# experiment (`--grid=--faults=[none, all]`) and PBT beside its random search
# (`--runner=pbt --grid='--exploit=[true, false]'`).
_CELL_ROWS = {"faults=none": (0, "fault-free"), "faults=all": (1, "faults injected"),
              "exploit=false": (0, "random search"), "exploit=true": (1, "PBT")}


def _summary_rows(entry: Dict, summary: Dict) -> List[Tuple[str, List[Dict], str]]:
    """`(label, seeds, reference)` of each row a shipped result gets: one, or one per
    cell of a comparison (fault-free and faults injected, a random search and PBT:
    never pooled)."""
    cells = [c for e in summary["experiments"] for c in e["cells"]]
    where = f"{entry['where']}, " if entry.get("where") else ""
    if len(cells) == 1 or not all(c["name"] in _CELL_ROWS for c in cells):
        label = f" ({entry['where']})" if entry.get("where") else ""
        return [(label, [s for c in cells for s in c["seeds"]], entry["reference"])]
    rows = []
    for cell in sorted(cells, key=lambda c: _CELL_ROWS[c["name"]][0]):
        order, label = _CELL_ROWS[cell["name"]]
        rows.append((f" ({where}{label})", cell["seeds"],
                     entry["reference"] if order else "the baseline of the row below"))
    return rows


def summary_table(results: List[Tuple[str, Dict]], catalog: List[Dict]) -> str:
    """Markdown: a row per shipped result (per cell of a chaos experiment), with the
    field's reference figure; medians of the seeds that reached the target."""
    by_name = dict(results)
    rows = ["| task | config | target | reached | steps to target | seconds | the field |",
            "|---|---|---:|---|---:|---:|---|"]
    for entry in catalog:
        summary = by_name[entry["result"]]
        target = summary["experiments"][0]["cells"][0]["target"]
        for label, seeds, reference in _summary_rows(entry, summary):
            reached = sum(s["env_steps_to_target"] is not None for s in seeds)
            rows.append(
                f"| {entry['task']} | [`{summary['config']}`](#{entry['result']}){label} | "
                f"{target:g} | {reached}/{len(seeds)} | "
                f"{report.steps(_median([s['env_steps_to_target'] for s in seeds]))} | "
                f"{report.number(_median([s['seconds_to_target'] for s in seeds]))} | "
                f"{reference} |")
    return "\n".join(rows)


def _relink(text: str, prefix: str) -> str:
    """`text`'s relative links (written for docs/), as seen from `prefix` ('' or '../')."""
    if not prefix:
        return text
    return re.sub(r"\]\((?!https?:|#)([^)]+)\)",
                  lambda m: f"]({prefix}{m.group(1)})".replace("../experiments/", ""), text)


def _sections(results: List[Tuple[str, Dict]], level: str, images: str) -> List[str]:
    """Per results file: its command, note, curves and every seed's figures."""
    parts = []
    for name, summary in results:
        parts += [f"{level} {name}", "", f"`{summary['config']}`, {summary['source']}.", ""]
        if summary.get("command"):  # one line per experiment of the summary
            parts += ["\n".join("    " + line for line in summary["command"].splitlines()), ""]
        if summary.get("note"):
            parts += [_relink(summary["note"], images), ""]
        if summary.get("normalization"):
            parts += [report.normalization_line(summary), ""]
        image = curves_image(name, summary)
        if image:
            axes = {cell.get("axis", "env steps") for experiment in summary["experiments"]
                    for cell in experiment["cells"]}
            parts += [f"![{name}: average return against {' or '.join(sorted(axes))} and "
                      f"seconds]({images}{image})", ""]
        several = len(summary["experiments"]) > 1
        for experiment in summary["experiments"]:
            parts += [f"{level}# {experiment['name']}", ""] if several else []
            if summary["source"] != "by hand":
                parts += [report.cells_table(experiment), ""]
            parts += [report.seeds_table(experiment), ""]
            chaos = ledgers.chaos_table(experiment)
            parts += [chaos, ""] if chaos else []
    return parts


def results_page(results: List[Tuple[str, Dict]], catalog: List[Dict]) -> str:
    """`docs/results.md`: the summary table, then the shipped results grouped by task."""
    parts = ["# Results", "", _ABOUT, "", "## Summary", "",
             "One row per shipped config; the chaos runs' fault-free and fault-injected "
             "seeds, local and on a Ray cluster, each a row of their own. Steps and "
             "seconds to target: medians of the seeds that reached it. The field: the "
             "figure a user would compare with "
             "(SB3: the rl-baselines3-zoo benchmark, one run, final evaluation; MinAtar: the "
             "MinAtar paper's DQN). Ablations and tuning history: "
             "[Ablations](experiments/ablations.md).", "", summary_table(results, catalog), ""]
    shipped = dict(_shipped(results, catalog))
    for task in dict.fromkeys(entry["task"] for entry in catalog):
        parts += [f"## {task}", ""]
        names = [e["result"] for e in catalog if e["task"] == task]
        parts += _sections([(n, shipped[n]) for n in names], "###", "")
    return "\n".join(parts)


def ablations_page(results: List[Tuple[str, Dict]], catalog: List[Dict]) -> str:
    """`docs/experiments/ablations.md`: every result that is not a shipped config's."""
    shipped = {entry["result"] for entry in catalog}
    others = [(name, summary) for name, summary in results if name not in shipped]
    parts = ["# Ablations and tuning history", "", _ABOUT, "",
             "A/B runs and earlier settings behind the shipped configs; the shipped results "
             "are on the [Results](../results.md) page.", ""]
    return "\n".join(parts + _sections(others, "##", "../"))


def curves_image(name: str, summary: Dict) -> Optional[str]:
    """The PNG of `name`'s curves, relative to `docs/` (None: a result without curves)."""
    if summary.get("curves"):
        return summary["curves"]
    return f"results/{name}.png" if summary["source"] != "by hand" else None


def _draw_missing_curves(root: str, results: List[Tuple[str, Dict]],
                         redraw: Sequence[str] = ()) -> List[str]:
    """Draws `docs/results/<name>.png` for experiment results that lack one, and for
    the names in `redraw` (results published anew)."""
    drawn = []
    for name, summary in results:
        path = os.path.join(root, "docs", f"results/{name}.png")
        if summary["source"] != "by hand" and (name in redraw or not os.path.exists(path)):
            report.plot(summary, path)
            drawn.append(path)
    return drawn


def _replace_block(text: str, table: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"no '{BEGIN}' ... '{END}' block")
    return pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", text)


def render(root: str) -> Dict[str, str]:
    """`{path: content}` of the generated files under the repository `root`."""
    results_dir = os.path.join(root, "docs", "results")
    results, catalog = load_results(results_dir), load_catalog(results_dir)
    readme = os.path.join(root, "README.md")
    with open(readme) as f:
        text = f.read()
    baselines = [entry["result"] for entry in catalog if entry.get("baseline")]
    return {readme: _replace_block(text, configs_table(_shipped(results, catalog), baselines)),
            os.path.join(root, "docs", "results.md"): results_page(results, catalog),
            os.path.join(root, "docs", "experiments", "ablations.md"):
                ablations_page(results, catalog)}


def write(root: str, redraw: Sequence[str] = ()) -> List[str]:
    """Rewrites the generated files; returns those that changed.

    Args:
        root: the repository checkout.
        redraw: names of results whose curves PNG is drawn again even if it
            exists (`--publish` passes the one it wrote).
    """
    changed = _draw_missing_curves(root, load_results(os.path.join(root, "docs", "results")),
                                   redraw)
    for path, content in render(root).items():
        old = open(path).read() if os.path.exists(path) else None
        if content != old:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            layout.write_text(path, content)
            changed.append(path)
    return changed


def check(root: str) -> List[str]:
    """The generated files that differ from what the summaries give (empty: up to date)."""
    return [path for path, content in render(root).items()
            if not os.path.exists(path) or open(path).read() != content]
