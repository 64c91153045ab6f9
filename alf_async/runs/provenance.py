"""What made a cell's results: its gin files' content, bindings, target, runner and
the project's version, compared before a seed is added and before one is reported.

A cell records them when first made (`cell.json`). Re-running an experiment
into the same directory with anything different is refused, naming the
difference (or goes to a new cell, `--new_cell`); the report refuses a seed
whose operative gin config contradicts one of its cell's bindings.
"""

import os
from typing import Dict, List, Sequence

from alf_async.config import gin_bindings, gin_digests, project_version, run_tags  # noqa: F401


def differences(saved: Dict, new: Dict) -> List[str]:
    """What differs between two cells' records (`Cell` as dicts), one phrase each."""
    found = []
    for field in ("gin_files", "target", "runner"):
        if saved.get(field) != new.get(field):
            found.append(f"{field} {saved.get(field)!r} -> {new.get(field)!r}")
    if tuple(saved.get("gin_sha256") or ()) == tuple(new.get("gin_sha256") or ()):
        pass
    elif not saved.get("gin_sha256"):
        found.append("the cell predates content digests")
    elif saved["gin_files"] == new["gin_files"]:
        changed = [os.path.basename(path) for path, a, b in
                   zip(new["gin_files"], saved["gin_sha256"], new["gin_sha256"]) if a != b]
        found.append(f"content of {', '.join(changed)} changed")
    removed = [b for b in saved.get("bindings", ()) if b not in new.get("bindings", ())]
    added = [b for b in new.get("bindings", ()) if b not in saved.get("bindings", ())]
    found += [f"binding {b!r} removed" for b in removed] + [f"binding {b!r} added" for b in added]
    if saved.get("version") and new.get("version") and saved["version"] != new["version"]:
        found.append(f"version {saved['version']} -> {new['version']}")
    return found


def _plain(value) -> bool:
    """Whether `value` is a literal (not a `@reference` or a `%macro`), so compares."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    return value is None or isinstance(value, (bool, int, float, str))


def operative_mismatches(operative_text: str, bindings: Sequence[str]) -> List[str]:
    """The `bindings` that the operative config `operative_text` contradicts, as
    `binding (ran with VALUE)`; a binding it does not mention is not counted."""
    ran = gin_bindings(operative_text)
    found = []
    for binding in bindings:
        for key, value in gin_bindings(binding).items():
            if key in ran and _plain(value) and _plain(ran[key]) and ran[key] != value:
                found.append(f"{binding} (ran with {ran[key]!r})")
    return found
