"""Reports of experiments: `summary.json` (the data), `results.md` and `curves.png`.

An experiment directory holds cells (`<cell>/cell.json`), each with seed runs
(`<cell>/seed_<S>/`). A directory of seed runs with no `cell.json`, or one
training root_dir, is read as a single cell too, so hand-made runs report the
same way. The Markdown tables are a pure function of the summary, so the
docs' result tables are regenerated from committed summaries
(`docs/results/*.json`) and checked by a test.
"""

import json
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

from alf_async import extras
from alf_async.experiments import ledgers, stats
from alf_async.experiments.cells import Cell, load_cell
from alf_async.runs import layout, provenance, records
from alf_async.runs.curves import downsample, load_curve, save_figure, score_axis

METRICS = ("env_steps_to_target", "seconds_to_target", "best", "final", "last25_min")


def _seed_dirs(cell_dir: str) -> List[str]:
    names = [n for n in os.listdir(cell_dir) if re.fullmatch(r"seed_\d+", n)]
    return [os.path.join(cell_dir, n) for n in sorted(names, key=lambda n: int(n[5:]))]


def find_cells(experiment_dir: str) -> List[tuple]:
    """`(cell_dir, Cell)` pairs of an experiment directory (see the module doc)."""
    experiment_dir = os.path.normpath(experiment_dir)
    if not os.path.isdir(experiment_dir):
        raise ValueError(f"{experiment_dir} is not a directory")
    name = os.path.basename(experiment_dir)
    bare = lambda d: Cell(os.path.basename(d), (), (), ())
    if load_cell(experiment_dir) or _seed_dirs(experiment_dir):
        return [(experiment_dir, load_cell(experiment_dir) or bare(experiment_dir))]
    subdirs = sorted(os.path.join(experiment_dir, n) for n in os.listdir(experiment_dir))
    cells = [(d, load_cell(d)) for d in subdirs if load_cell(d)]
    if cells:
        return cells
    if os.path.isdir(os.path.join(experiment_dir, "train")):
        return [(experiment_dir, Cell(name, (), (), ()))]
    raise ValueError(f"{experiment_dir} holds no experiment cells, seed runs or training run")


def summarize_cell(cell_dir: str, cell: Cell, target: Optional[float]) -> Dict:
    """A cell's per-seed figures and curves, aggregates and mean curves."""
    target = cell.target if target is None else target
    runs = _seed_dirs(cell_dir) or [cell_dir]
    seeds, curves, scored = [], [], None
    for run_dir in runs:
        if not os.path.isdir(os.path.join(run_dir, "train")):
            continue  # a seed that has not started yet
        curve = load_curve(run_dir)
        if not len(curve["value"]):
            continue  # no episode finished yet
        _check_operative(run_dir, cell)
        match = re.fullmatch(r"seed_(\d+)", os.path.basename(run_dir))
        ledger, nodes = ledgers.read_ledger(run_dir), layout.nodes_of(run_dir)
        seeds.append(dict(seed=int(match.group(1)) if match else None,
                          run_dir=os.path.relpath(run_dir, os.path.dirname(cell_dir)),
                          finished=os.path.exists(os.path.join(run_dir, layout.RESULT_FILE)),
                          **stats.seed_figures(curve, target), curve=downsample(curve),
                          **({} if ledger is None else dict(ledger=ledger)),
                          **(dict(nodes=nodes) if nodes else {})))
        curves.append(curve)
        scored = scored or run_dir
    if not seeds:
        raise ValueError(f"{cell_dir} has no run with a finished episode")
    return dict(name=cell.label, gin_files=list(cell.gin_files), bindings=list(cell.bindings),
                target=target, axis=score_axis(scored), **_env_and_budget(runs[0]),
                seeds=seeds,
                reached=sum(s["env_steps_to_target"] is not None for s in seeds),
                aggregate={m: stats.aggregate([s[m] for s in seeds]) for m in METRICS},
                curve_vs_env_steps=stats.mean_curve(curves, "env_steps"),
                curve_vs_seconds=stats.mean_curve(curves, "seconds"))


def _check_operative(run_dir: str, cell: Cell) -> None:
    """Raises ValueError where the seed in `run_dir` ran with other values than its
    cell's bindings (a seed made before the cell was changed)."""
    path = os.path.join(run_dir, "operative_config.gin")
    if not os.path.exists(path):
        return
    with open(path) as f:
        wrong = provenance.operative_mismatches(f.read(), cell.gin_bindings)
    if wrong:
        raise ValueError(f"{run_dir} did not run with its cell's settings: {'; '.join(wrong)}")


def _env_and_budget(run_dir: str) -> Dict:
    """`env` and `budget` (env steps) as the run's `run_settings.json` records them."""
    recorded = records.read_records(run_dir)
    if recorded is None:
        return dict(env=None, budget=None)
    return dict(env=recorded.env.env_name, budget=recorded.run.num_env_steps)


def summarize(experiment_dirs: List[str], target: Optional[float] = None,
              normalize: Optional[Tuple[float, float]] = None) -> Dict:
    """The summary of several experiment directories, side by side; `normalize`:
    (random, expert) returns, for D4RL's normalized scores (`normalized`)."""
    summary = dict(experiments=[
        dict(name=os.path.basename(os.path.normpath(d)),
             cells=[summarize_cell(cell_dir, cell, target) for cell_dir, cell in find_cells(d)])
        for d in experiment_dirs])
    if normalize is not None:
        normalized(summary, *normalize)
    return summary


def normalized(summary: Dict, random_return: float, expert_return: float) -> None:
    """Adds D4RL's score, 100 × (final − random) / (expert − random), to each seed
    (`normalized`) and its cell's aggregates, and the two returns to `summary`."""
    if expert_return == random_return:
        raise ValueError(f"--normalize needs two different returns, got {random_return:g} "
                         f"twice")
    summary["normalization"] = dict(random=random_return, expert=expert_return)
    for experiment in summary["experiments"]:
        for cell in experiment["cells"]:
            for seed in cell["seeds"]:
                seed["normalized"] = (100.0 * (seed["final"] - random_return) /
                                      (expert_return - random_return))
            cell["aggregate"]["normalized"] = stats.aggregate(
                [seed["normalized"] for seed in cell["seeds"]])


def number(value, digits: int = 1) -> str:
    if value is None:
        return "—"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def steps(value: Optional[float]) -> str:
    """Env steps as 204.8k or 1.20M (— for None)."""
    if value is None:
        return "—"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.1f}k"


def _with_ci(aggregate: Dict, show: Callable[[Optional[float]], str]) -> str:
    low, high = aggregate["ci95"]
    if aggregate["iqm"] is None:
        return "—"
    interval = "" if low is None else f" [{show(low)}, {show(high)}]"
    return f"{show(aggregate['iqm'])}{interval}"


def _row(cells: List[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def cells_table(experiment: Dict) -> str:
    """Markdown: one row per cell, medians and IQMs [95 % CI] over its seeds."""
    steps_word = _steps_word(experiment)
    rows = [f"| cell | reached | {steps_word} to target: median; IQM [95 % CI] | "
            "seconds to target: median | final: IQM [95 % CI] | "
            "last-25 % min: IQM [95 % CI] |",
            "|---|---|---|---:|---|---|"]
    scored = any("normalized" in cell["aggregate"] for cell in experiment["cells"])
    if scored:
        rows = [rows[0] + " normalized final: IQM [95 % CI] |", rows[1] + "---|"]
    for cell in experiment["cells"]:
        agg = cell["aggregate"]
        target = "—" if cell["target"] is None else f"{cell['target']:g}"
        to_target = agg["env_steps_to_target"]
        rows.append(_row([
            cell["name"], f"{cell['reached']}/{len(cell['seeds'])} (target {target})",
            f"{number(to_target['median'], 0)}; {_with_ci(to_target, steps)}",
            number(agg["seconds_to_target"]["median"]), _with_ci(agg["final"], number),
            _with_ci(agg["last25_min"], number)] +
            ([_with_ci(agg["normalized"], number)] if scored else [])))
    return "\n".join(rows)


def _steps_word(experiment: Dict) -> str:
    """What the experiment's steps count: 'learner iterations' where every cell is
    offline (scored against iterations), else 'env steps'."""
    axes = {cell.get("axis", "env steps") for cell in experiment["cells"]}
    return "learner iterations" if axes == {"learner iterations"} else "env steps"


def seeds_table(experiment: Dict) -> str:
    """Markdown: one row per seed of every cell (the cell named where there are several;
    the nodes it ran on where a seed ran on a cluster)."""
    named = len(experiment["cells"]) > 1
    placed = any(s.get("nodes") for cell in experiment["cells"] for s in cell["seeds"])
    scored = any("normalized" in s for cell in experiment["cells"] for s in cell["seeds"])
    steps_word = _steps_word(experiment)
    rows = [("| cell " if named else "") + f"| seed | {steps_word} to target | seconds to target "
            f"| best | final | last-25 % min | {steps_word} | seconds |" + " normalized |" * scored
            + " node |" * placed,
            ("|---" if named else "") + "|---:|---:|---:|---:|---:|---:|---:|---:|"
            + "---:|" * scored + "---|" * placed]
    for cell in experiment["cells"]:
        for s in cell["seeds"]:
            seed = "—" if s["seed"] is None else str(s["seed"])
            rows.append(_row([cell["name"]] * named + [
                seed, number(s["env_steps_to_target"], 0),
                number(s["seconds_to_target"]), number(s.get("best")), number(s.get("final")),
                number(s.get("last25_min")), number(s.get("env_steps"), 0),
                number(s.get("seconds"))] + [number(s.get("normalized"))] * scored +
                [" → ".join(s.get("nodes", ["—"]))] * placed))
    return "\n".join(rows)


def markdown(summary: Dict) -> str:
    """`results.md`: per experiment, the cells' aggregates and every seed's figures."""
    parts = ["# Results", "",
             "Figures are read from the average return the trainer writes after every "
             "learn batch (runs before that change: every `train.summary_interval` "
             "iterations). Seconds count from the run's first summary event (after imports "
             "and building, before compiling). IQM: interquartile mean over seeds; CI: 95 % "
             "percentile bootstrap. Last-25 % min: the lowest average return over the last "
             "quarter of the run's env steps. An offline run's score is its greedy "
             "evaluation's return, against learner iterations.", ""]
    parts += [normalization_line(summary), ""] if "normalization" in summary else []
    for experiment in summary["experiments"]:
        parts += [f"## {experiment['name']}", "", cells_table(experiment), "",
                  seeds_table(experiment), ""]
        chaos = ledgers.chaos_table(experiment)
        parts += [chaos, ""] if chaos else []
    return "\n".join(parts)


def normalization_line(summary: Dict) -> str:
    """The sentence that says how `summary`'s normalized scores were made."""
    return ("Normalized: D4RL's score, 100 × (final − random) / (expert − random), with "
            "random {random:g} and expert {expert:g}.".format(**summary["normalization"]))


def plot(summary: Dict, path: str) -> None:
    """`curves.png`: every cell's mean return with its 95 % CI, against env steps and
    time, over each of its seeds' own curves (thin)."""
    plt = extras.pyplot("python -m alf_async.experiment report", "experiment")

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    several = len(summary["experiments"]) > 1
    for experiment in summary["experiments"]:
        for cell in experiment["cells"]:
            label = f"{experiment['name']}/{cell['name']}" if several else cell["name"]
            label += f" ({len(cell['seeds'])} seeds)"
            for ax, key, x_key in zip(axes, ("curve_vs_env_steps", "curve_vs_seconds"),
                                      ("env_steps", "seconds")):
                curve = cell[key]
                line, = ax.plot(curve["x"], curve["mean"], label=label)
                for seed in cell["seeds"]:
                    ax.plot(seed["curve"][x_key], seed["curve"]["value"], linewidth=0.6,
                            alpha=0.35, color=line.get_color())
                if curve["low"][0] is not None:
                    ax.fill_between(curve["x"], curve["low"], curve["high"], alpha=0.2,
                                    color=line.get_color())
    axis = " or ".join(sorted({cell.get("axis", "env steps") for experiment in
                               summary["experiments"] for cell in experiment["cells"]}))
    for ax, xlabel in zip(axes, (axis, "seconds since the run's first event")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("average return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Each cell: the mean over its seeds (a finished seed holds its last value) "
                 "with its 95 % CI; each seed thin", fontsize=9)
    save_figure(plt, fig, path)


def write_report(experiment_dirs: List[str], out_dir: str, target: Optional[float] = None,
                 normalize: Optional[Tuple[float, float]] = None) -> Dict:
    """Writes `summary.json`, `results.md` and `curves.png` to `out_dir`; returns the
    summary (`normalize`: as `summarize`'s)."""
    summary = summarize(experiment_dirs, target, normalize)
    os.makedirs(out_dir, exist_ok=True)
    layout.write_text(os.path.join(out_dir, "summary.json"), json.dumps(summary, indent=1))
    layout.write_text(os.path.join(out_dir, "results.md"), markdown(summary))
    plot(summary, os.path.join(out_dir, "curves.png"))
    return summary
