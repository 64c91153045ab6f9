"""What made a cell's results: its gin files' content, bindings, target, runner and
the project's version, compared before a seed is added and before one is reported.

A cell records them when first made (`cell.json`). Re-running an experiment
into the same directory with anything different is refused, naming the
difference (or goes to a new cell, `--new_cell`); the report refuses a seed
whose operative gin config contradicts one of its cell's bindings.
"""

import hashlib
import os
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from alf_async.config import gin_bindings



def gin_digests(gin_files: Sequence[str]) -> Tuple[Optional[str], ...]:
    """The sha256 of each gin file's content (its includes are not followed; None
    for a file that is not there: the commands check that before)."""
    digests = []
    for path in gin_files:
        try:
            with open(path, "rb") as f:
                digests.append(hashlib.sha256(f.read()).hexdigest())
        except FileNotFoundError:
            digests.append(None)
    return tuple(digests)


def project_version() -> Optional[str]:
    """The git commit of the checkout this package runs from (`+dirty` with local
    changes), or None where it is not a git checkout."""
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isdir(os.path.join(source, ".git")):
        return None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=source, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


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


def run_tags(root_dir: str, gin_files: Sequence[str]) -> Dict[str, str]:
    """A run's provenance as a tracker's tags, the same a cell's `cell.json` holds: the
    commit, the gin files with their sha256, and the run's root_dir."""
    return {"commit": project_version() or "unknown", "gin_files": ",".join(gin_files),
            "gin_sha256": ",".join(d or "missing" for d in gin_digests(gin_files)),
            "root_dir": os.path.abspath(root_dir)}
