"""Which tracker a run reports to, and the flags every command shares for it.

Light: the commands check these flags before TensorFlow is imported.
"""

import dataclasses
import json
import os
import sys
from typing import List, Optional

from absl import flags

from alf_async import extras

TRACKERS = ("none", "mlflow", "wandb")
# tracker -> (module, extra)
_MODULES = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
RUN_FILE = "tracker.json"  # in a run's root_dir: the tracker run it continues


@dataclasses.dataclass(frozen=True)
class TrackerSettings:
    """Where a run's summaries go besides TensorBoard.

    Attributes:
        kind: "none", "mlflow" or "wandb".
        uri: MLflow's tracking URI (None: `MLFLOW_TRACKING_URI`, else MLflow's
            default `./mlruns`); unused by W&B.
        project: the MLflow experiment or W&B project.
        group: the runs' group: an experiment's cell or a tune study (an MLflow
            parent run, a W&B group); None: none.
        name: the run's name (None: its root_dir's last two parts).
    """

    kind: str = "none"
    uri: Optional[str] = None
    project: str = "alf_async"
    group: Optional[str] = None
    name: Optional[str] = None

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def check(self) -> None:
        """Raises ValueError naming a bad setting; `MissingExtraError` for a tracker
        whose package this install lacks (without importing it)."""
        if self.kind not in TRACKERS:
            raise ValueError(f"--tracker must be one of {', '.join(TRACKERS)}, got "
                             f"{self.kind!r}")
        if self.kind in _MODULES:
            module, extra = _MODULES[self.kind]
            extras.check_installed(module, extra, f"--tracker={self.kind}")

    def flags(self, group: Optional[str] = None, name: Optional[str] = None) -> List[str]:
        """This setting as a child command's flags, in `group` under `name` (None:
        this one's)."""
        if not self.enabled:
            return []
        settings = dataclasses.replace(self, group=group or self.group, name=name or self.name)
        return [f"--tracker_{field}={value}" if field != "kind" else f"--tracker={value}"
                for field, value in dataclasses.asdict(settings).items() if value is not None]


def define_flags() -> None:
    """Defines --tracker, --tracker_uri, --tracker_project, --tracker_group and
    --tracker_name on absl's flags, as the calling command's own (in its --help)."""
    caller = sys._getframe(1).f_globals["__name__"]  # pylint: disable=protected-access
    module = dict(module_name=sys.argv[0] if caller == "__main__" else caller)
    helps = {
        "tracker": "none, mlflow or wandb: also report the run to MLflow or Weights & Biases "
                   "(offline unless WANDB_MODE says otherwise): the summaries against env "
                   "steps, the bindings, result.json, the policy.",
        "tracker_uri": "MLflow's tracking URI (default: MLFLOW_TRACKING_URI, else ./mlruns).",
        "tracker_project": "The MLflow experiment or W&B project.",
        "tracker_group": "The run's group (an MLflow parent run, a W&B group); experiment and "
                         "tune set it.",
        "tracker_name": "The run's name (default: its root_dir's last two parts)."}
    defaults = dict(tracker="none", tracker_project="alf_async")
    for name, text in helps.items():
        flags.DEFINE_string(name, defaults.get(name), text, **module)


def from_flags() -> TrackerSettings:
    """The settings the --tracker* flags give (after `define_flags`)."""
    values = flags.FLAGS
    return TrackerSettings(values.tracker, values.tracker_uri, values.tracker_project,
                           values.tracker_group, values.tracker_name)


def read_run_file(root_dir: str) -> dict:
    """What `root_dir` recorded of its tracker runs: `{kind: run id,
    f"{kind}_sent_until": the wall time of the last summary event sent}`."""
    try:
        with open(os.path.join(root_dir, RUN_FILE)) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def update_run_file(root_dir: str, **values) -> None:
    """Records `values` in `root_dir`'s tracker file (whole or not at all)."""
    known = dict(read_run_file(root_dir), **values)
    path = os.path.join(root_dir, RUN_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(known, f)
    os.replace(path + ".tmp", path)
