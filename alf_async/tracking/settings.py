"""Which tracker a run reports to, and the flags every command shares for it.

Light: the commands check these flags before TensorFlow is imported.
"""

import dataclasses
import json
import os
import sys
import urllib.error
import urllib.request
from typing import List, NamedTuple, Optional

from absl import flags

from alf_async import extras
from alf_async.runs import layout



class TrackerKind(NamedTuple):
    """One tracker a run can report to: the package it needs, the pip extra that brings
    it, and its client's class (in `tracking.clients`) by name."""
    module: str
    extra: str
    client: str


# --tracker's values: the one list of trackers ("none": TensorBoard alone).
TRACKERS = {"none": None,
            "mlflow": TrackerKind("mlflow", "mlflow", "MlflowTracker"),
            "wandb": TrackerKind("wandb", "wandb", "WandbTracker")}
RUN_FILE = "tracker.json"  # in a run's root_dir: the tracker run it continues


@dataclasses.dataclass(frozen=True)
class TrackerSettings:
    """Where a run's summaries go besides TensorBoard.

    Attributes:
        kind: a name of `TRACKERS` ("none": TensorBoard alone).
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

    def check(self, contact: bool = True) -> None:
        """Raises ValueError naming a bad setting or an MLflow server that does not
        answer; `MissingExtraError` for a tracker whose package this install lacks
        (without importing it). `contact` False: the server is not asked (a run that
        already reported, resumed or restarted: its sends are retried in the background)."""
        if self.kind not in TRACKERS:
            raise ValueError(f"--tracker must be one of {', '.join(TRACKERS)}, got "
                             f"{self.kind!r}")
        if TRACKERS[self.kind] is not None:
            module, extra, _ = TRACKERS[self.kind]
            extras.check_installed(module, extra, f"--tracker={self.kind}")
        if self.kind == "mlflow" and contact and self.group is None:
            # a run of a group (a seed, a trial, a member) was checked by the command
            # that made the group: a server down later is retried in the background
            check_mlflow_server(self.uri or os.environ.get("MLFLOW_TRACKING_URI"))

    def flags(self, group: Optional[str] = None, name: Optional[str] = None) -> List[str]:
        """This setting as a child command's flags, in `group` under `name` (None:
        this one's)."""
        if not self.enabled:
            return []
        settings = dataclasses.replace(self, group=group or self.group, name=name or self.name)
        return [f"--tracker_{field}={value}" if field != "kind" else f"--tracker={value}"
                for field, value in dataclasses.asdict(settings).items() if value is not None]


def check_mlflow_server(uri: Optional[str], timeout_secs: float = 5.0) -> None:
    """Raises ValueError (one line) where `uri` is an MLflow server's address and no
    server answers its `/health` there: found before training, not at the run's end.
    A file store (no URI, a path, `file:`) needs no server."""
    if not uri or not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_secs):
            return
    except urllib.error.HTTPError as error:
        answer = f"HTTP {error.code}"
    except (OSError, ValueError) as error:
        answer = str(getattr(error, "reason", error))
    raise ValueError(f"--tracker_uri={uri}: no MLflow server answers there ({answer}); start "
                     f"one (mlflow server --host 127.0.0.1 --port PORT) or fix the URI")


def define_flags() -> None:
    """Defines --tracker, --tracker_uri, --tracker_project, --tracker_group and
    --tracker_name on absl's flags, as the calling command's own (in its --help)."""
    caller = sys._getframe(1).f_globals["__name__"]  # pylint: disable=protected-access
    module = dict(module_name=sys.argv[0] if caller == "__main__" else caller)
    helps = {
        "tracker": f"{', '.join(TRACKERS)}: also report the run to MLflow or Weights & Biases "
                   "(offline unless WANDB_MODE says otherwise): the summaries against env "
                   f"steps, the bindings, {layout.RESULT_FILE}, the policy.",
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


def reported_before(root_dir: str) -> bool:
    """Whether the run in `root_dir` already opened its tracker run."""
    return bool(read_run_file(root_dir))


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
