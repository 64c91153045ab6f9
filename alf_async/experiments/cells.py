"""What an experiment runs: seeds, grids of gin bindings, and the cells they make.

A *cell* is one setting: the gin files and bindings every seed of it shares,
and the runner that trains a seed (`train`: `python -m alf_async.train`;
`chaos`: the same run under the supervised launch with faults injected,
`python -m alf_async.chaos`; `pbt`: a population, `python -m
alf_async.pbt`, its curve the best member's score at each ready point). A grid
`'alf_async.Learner.learning_rate=[1e-3, 3e-4]'` makes one cell per value;
several grids make their cartesian product.
A binding that starts with `--` is a flag of the runner's command instead of
a gin binding: `--grid='--faults=[none, all]'` makes a fault-free cell and a
chaos cell.
"""

import dataclasses
import itertools
import json
import os
import re
from typing import List, Optional, Sequence, Tuple

from alf_async.runs import provenance
from alf_async.runs import layout

CELL_FILE = "cell.json"  # in every cell directory: what made its seeds (`provenance`)


def parse_seeds(text: str) -> List[int]:
    """`'1-5'` -> [1, 2, 3, 4, 5]; `'1,3,7'` -> [1, 3, 7]; both may mix (`'1-3,9'`).

    Raises:
        ValueError: not a range or list of integers >= 0, or a seed twice.
    """
    seeds = []
    for part in text.replace(" ", "").split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise ValueError(f"--seeds must be a range or a list of integers >= 0 "
                             f"('1-5' or '1,3,7'), got {text!r}")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        seeds.extend(range(first, last + 1))
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds names a seed twice: {text!r}")
    return seeds


def _split_top_level(text: str) -> List[str]:
    """Splits at the commas outside brackets, parentheses and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def parse_grid(text: str) -> Tuple[str, List[str]]:
    """`'Learner.learning_rate=[1e-3, 3e-4]'` -> ('Learner.learning_rate', ['1e-3', '3e-4']).

    Values stay gin text, so tuples and references work: `[(64, 64), (256, 256)]`.

    Raises:
        ValueError: not `NAME=[V1, V2, ...]` with at least one value.
    """
    name, _, values = text.partition("=")
    name, values = name.strip(), values.strip()
    if not name or not values.startswith("[") or not values.endswith("]"):
        raise ValueError(f"--grid must be 'BINDING=[V1, V2, ...]', got {text!r}")
    parsed = _split_top_level(values[1:-1])
    if not parsed:
        raise ValueError(f"--grid {name} has no values")
    return name, parsed


@dataclasses.dataclass(frozen=True)
class Cell:
    """One setting of an experiment: its name (a directory) and its gin."""

    name: str
    gin_files: Tuple[str, ...]
    bindings: Tuple[str, ...]  # the experiment's --gin_param, then this cell's grid values
    grid: Tuple[Tuple[str, str], ...]  # (binding, value) of this cell's grid point
    target: object = None  # float or None: the return a seed must reach
    runner: str = "train"  # a key of RUNNERS
    gin_sha256: Tuple[str, ...] = ()  # the gin files' content, as it was
    version: Optional[str] = None  # the project's commit, where known
    # A `--new_cell` copy's differences from the cell whose name it extends
    # ("binding 'x' added"): named beside it in the report, the table and the legend.
    differs: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The name, with what differs from the cell it was renamed from."""
        return f"{self.name} ({'; '.join(self.differs)})" if self.differs else self.name

    @property
    def gin_bindings(self) -> Tuple[str, ...]:
        return tuple(b for b in self.bindings if not b.startswith("--"))

    @property
    def runner_flags(self) -> Tuple[str, ...]:
        return tuple(b for b in self.bindings if b.startswith("--"))

    def save(self, cell_dir: str) -> None:
        """Records the cell in `cell_dir`, whose seeds it made.

        Raises:
            ValueError: `cell_dir` already records a cell made otherwise,
                naming every difference.
        """
        os.makedirs(cell_dir, exist_ok=True)
        changed = self.differences(cell_dir)
        if changed:
            raise ValueError(f"{cell_dir} holds seeds made otherwise: {'; '.join(changed)}. "
                             f"Use another --out, or --new_cell")
        layout.write_text(os.path.join(cell_dir, CELL_FILE),
                         json.dumps(dataclasses.asdict(self), indent=1))

    def differences(self, cell_dir: str) -> List[str]:
        """How the cell recorded in `cell_dir` differs from this one ([] if none is)."""
        saved = load_cell(cell_dir)
        return provenance.differences(dataclasses.asdict(saved),
                                      dataclasses.asdict(self)) if saved else []

    def renamed_to_fit(self, out_dir: str) -> "Cell":
        """This cell, or a copy named `<name>-2`, `-3`, ... whose directory in
        `out_dir` is new or holds the same cell (`--new_cell`)."""
        cell, number = self, 1
        first = self.differences(os.path.join(out_dir, self.name))
        while cell.differences(os.path.join(out_dir, cell.name)):
            number += 1
            cell = dataclasses.replace(self, name=f"{self.name}-{number}",
                                       differs=tuple(f"vs {self.name}: {d}" for d in first))
        return cell


def load_cell(cell_dir: str):
    """The `Cell` saved in `cell_dir`, or None if there is none."""
    path = os.path.join(cell_dir, CELL_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    return Cell(data["name"], tuple(data["gin_files"]), tuple(data["bindings"]),
                tuple(tuple(g) for g in data["grid"]), data.get("target"),
                data.get("runner", "train"), tuple(data.get("gin_sha256", ())),
                data.get("version"), tuple(data.get("differs", ())))


def cell_again(path: str, extra_bindings: Sequence[str] = ()) -> Cell:
    """The cell saved at `path` (a `cell.json`, or its folder: an experiment's cell or a
    tune trial) made again from its gin files, its bindings, then `extra_bindings`.

    Raises:
        ValueError: no cell there, or a gin file that changed since it was made.
    """
    folder = path[:-len(CELL_FILE)] if path.endswith(CELL_FILE) else path
    saved = load_cell(folder or ".")
    if saved is None:
        raise ValueError(f"--cell={path}: no {CELL_FILE} there")
    again = make_cells(saved.gin_files, [*saved.bindings, *extra_bindings], [], saved.target,
                       saved.runner)[0]
    changed = [f for f, old, new in zip(saved.gin_files, saved.gin_sha256, again.gin_sha256)
               if old != new]
    if changed:
        raise ValueError(f"--cell={path}: {changed[0]} changed since the cell was made "
                         f"(its sha256 differs)")
    return dataclasses.replace(again, name=saved.name)


def _short(binding: str, value: str) -> str:
    """A directory-safe `name=value` from the binding's last part (a quoted path:
    its last component)."""
    name = binding.rsplit(".", 1)[-1].lstrip("-")
    value = re.sub(r"'([^']*)'", lambda m: os.path.basename(m.group(1).rstrip("/")), value)
    value = re.sub(r"[^A-Za-z0-9.+\-_,=]", "", value.replace(" ", "").replace(",", "_"))
    return f"{name}={value}"


RUNNERS = ("train", "chaos", "pbt")


def make_cells(gin_files: Sequence[str], bindings: Sequence[str], grids: Sequence[str],
               target=None, runner: str = "train") -> List[Cell]:
    """The cells of an experiment: one per point of the grids' product.

    With no grid there is one cell, named after the (last) gin file.

    Raises:
        ValueError: a malformed grid, a binding gridded twice, two cells
            whose names collide, or an unknown runner.
    """
    if runner not in RUNNERS:
        raise ValueError(f"--runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    parsed = [parse_grid(g) for g in grids]
    names = [name for name, _ in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"--grid names a binding twice: {names}")
    base = os.path.splitext(os.path.basename(gin_files[-1]))[0] if gin_files else "run"
    digests, version = provenance.gin_digests(gin_files), provenance.project_version()
    cells = []
    for point in itertools.product(*[[(name, v) for v in values] for name, values in parsed]):
        name = ",".join(_short(b, v) for b, v in point) or base
        cells.append(Cell(name, tuple(gin_files),
                          tuple(bindings) + tuple(f"{b}={v}" for b, v in point),
                          tuple(point), target, runner, digests, version))
    if len({c.name for c in cells}) != len(cells):
        raise ValueError(f"--grid values make cells with the same name: "
                         f"{[c.name for c in cells]}")
    return cells
