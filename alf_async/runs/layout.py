"""What a run's `root_dir` holds, by name, and the files written whole or not at all.

Every file and folder of a run that another command reads is named here:
`result.json` (the final metrics) and its reader, `run_settings.json`, the
checkpoints and their numbering, the score's summary tags, the exported
`policy/`. A reader sees the previous version of a file or the new one, never
a part: a text file is written beside its destination and renamed over it
(`os.replace`, atomic on POSIX); a directory (the exported policy) is built
beside its destination, and the previous one is kept as `<name>.previous`
until the new one is in place. A stop between those two renames leaves only
the previous version, which `readable_directory` finds.

Light on purpose (no TensorFlow): the experiment command, the chaos tool, PBT
and `play` use it before their heavy imports, or without them. Thread-safety:
one writer per destination.
"""

import glob
import json
import os
import re
import shutil
from typing import List, Optional, Tuple

POLICY_DIR = "policy"  # the exported SavedModel, in a run's root_dir
RESULT_FILE = "result.json"  # a complete run's final metrics (`training.run._result`)
CHECKPOINT_DIR = "checkpoints"  # the chief's `tf.train.CheckpointManager` folder
_CHECKPOINT = re.compile(r"ckpt-(\d+)\.index")  # a checkpoint's index, numbered by iteration
LOG_FILE = "train.log"  # a placed run's command output (`supervision.placement`)
NODE_FILE = "node.json"  # {"nodes": [address, ...]} a placed run ran on (Ray)
SETTINGS_FILE = "run_settings.json"  # the run's settings records (`training.settings`)
# the score's curves in train/ (`training.scores`): an online run's, every iteration against
# env steps; an offline run's, at each greedy evaluation against learner iterations
RETURN_TAG = "Metrics_vs_EnvironmentSteps/AverageReturn"
EVAL_RETURN_TAG = "Metrics_vs_Iterations/EvalReturn"
SCORE_AXES = {RETURN_TAG: "env steps", EVAL_RETURN_TAG: "learner iterations"}
PREVIOUS = ".previous"
_STAGED = ".partial-"


def write_text(path: str, text: str) -> None:
    """Writes `text` to `path` whole: a reader sees the old file or the new one."""
    write_bytes(path, text.encode())


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` whole (its folder made if missing): a reader sees the
    old file or the new one."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    staged = f"{path}{_STAGED}{os.getpid()}"
    with open(staged, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staged, path)


def staged_directory(path: str) -> str:
    """An empty directory beside `path` to build its next version in; removes what
    earlier writers that died left there."""
    for leftover in glob.glob(f"{glob.escape(path)}{_STAGED}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    staged = f"{path}{_STAGED}{os.getpid()}"
    os.makedirs(os.path.dirname(staged) or ".", exist_ok=True)
    return staged


def replace_directory(staged: str, path: str) -> None:
    """Puts the complete directory `staged` at `path`, in place of the previous one,
    which stays whole (as `path.previous`) until `staged` is there."""
    previous = path + PREVIOUS
    if os.path.isdir(path):
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(path, previous)
    os.rename(staged, path)
    shutil.rmtree(previous, ignore_errors=True)


def readable_directory(path: str) -> Optional[str]:
    """`path`, or its previous version where a replacement stopped between its
    renames; None where there is neither."""
    for candidate in (path, path + PREVIOUS):
        if os.path.isdir(candidate):
            return candidate
    return None


def complete_saved_model(path: str) -> bool:
    """Whether `path` holds a SavedModel with its graph and its variables' index."""
    return (os.path.isfile(os.path.join(path, "saved_model.pb"))
            and os.path.isfile(os.path.join(path, "variables", "variables.index")))


def read_settings(root_dir: str) -> Optional[dict]:
    """The run's settings records as `training.settings.Settings.to_json()` wrote
    them (`{"run": {...}, "sizes": {...}, "replay": {...}, "env": {...}}`), or None
    where the run has not started (no `run_settings.json`)."""
    try:
        with open(os.path.join(root_dir, SETTINGS_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def checkpoint_name(number: int) -> str:
    """The prefix's name of checkpoint `number` (its files: `<name>.index`, `.data-*`)."""
    return f"ckpt-{number}"


def checkpoint_number(file_name: str) -> Optional[int]:
    """The number of the checkpoint whose index file is `file_name`, else None."""
    found = _CHECKPOINT.fullmatch(file_name)
    return int(found.group(1)) if found else None


def checkpoints_in(directory: str) -> List[Tuple[int, str]]:
    """`(number, prefix)` of every checkpoint whose index file is in `directory`, newest
    first; read from the files themselves, not from the `checkpoint` state file, which
    a kill mid-write may have left behind or torn."""
    numbered = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.index")):
        number = checkpoint_number(os.path.basename(path))
        if number is not None and os.path.isfile(path):
            numbered.append((number, path[:-len(".index")]))
    return sorted(numbered, reverse=True)


def latest_checkpoint(root_dir: str) -> Optional[Tuple[int, str]]:
    """`(number, prefix)` of the run's newest checkpoint; None where it has none."""
    found = checkpoints_in(os.path.join(root_dir, CHECKPOINT_DIR))
    return found[0] if found else None


def read_result(root_dir: str) -> Optional[dict]:
    """The final metrics of a complete run in `root_dir` (`result.json`), None if it has
    none."""
    try:
        with open(os.path.join(root_dir, RESULT_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def nodes_of(root_dir: str) -> List[str]:
    """The nodes a run ran on, in order (`NODE_FILE`; [] for a run of this host)."""
    try:
        with open(os.path.join(root_dir, NODE_FILE)) as f:
            return list(json.load(f)["nodes"])
    except (OSError, ValueError, KeyError):
        return []


def note_node(root_dir: str, address: str) -> None:
    """Adds `address` to the run's `NODE_FILE`."""
    write_text(os.path.join(root_dir, NODE_FILE),
               json.dumps(dict(nodes=nodes_of(root_dir) + [address])))
