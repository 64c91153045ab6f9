"""The tracker clients behind one small interface: MLflow and Weights & Biases.

Every method may raise (a server down, a full disk): the forwarder that calls
them, from its own thread, catches that and retries. None is thread-safe; one
forwarder thread uses a client.
"""

import contextlib
import io
import os
import time
from typing import Dict, List, NamedTuple, Optional, Protocol, Sequence

from absl import logging

from alf_async import extras
from alf_async.tracking.settings import TRACKERS, TrackerSettings

GROUP_TAG = "alf_async.group"  # an MLflow run that is a group's parent
_PARAM_CHARS = 500  # MLflow's limit on a parameter's value before 2.x


class Point(NamedTuple):
    """One scalar TensorBoard got, against env steps."""

    tag: str
    env_steps: int
    value: float


class Tracker(Protocol):
    """A tracker run: opened once, then logged to, then closed."""

    def open(self, run_id: Optional[str], tags: Dict[str, str], directory: str) -> str:
        """Continues run `run_id` (None: makes a new one, files under
        `directory`); returns its id."""

    def log_params(self, params: Dict[str, str]) -> None:
        """The run's settings; a value changed at a resume is kept beside the first."""

    def log_points(self, points: Sequence[Point]) -> None:
        """Scalars, each at its env step."""

    def log_file(self, path: str, folder: Optional[str] = None) -> None:
        """A file or a directory's files, under `folder` of the run's artifacts."""

    def close(self, exit_code: int) -> None:
        """Ends the run with its command's exit code: 0 finished, 128 + N stopped by
        signal N (resumable), else failed."""


class MlflowTracker:
    """An MLflow run through `MlflowClient`; a group is a parent run tagged `GROUP_TAG`."""

    def __init__(self, settings: TrackerSettings):
        # A background thread that retries needs each call to fail fast, not after
        # MLflow's own minutes of retries.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        mlflow = extras.require("mlflow", "mlflow", "--tracker=mlflow")
        if settings.uri:  # artifacts served by the server find it through the global URI
            mlflow.set_tracking_uri(settings.uri)
        tracking = extras.require("mlflow.tracking", "mlflow", "--tracker=mlflow")
        self._entities = extras.require("mlflow.entities", "mlflow", "--tracker=mlflow")
        self._client = tracking.MlflowClient(settings.uri)
        self._settings = settings
        self.run_id: Optional[str] = None
        # A send that failed may have been stored all the same (a reply lost or
        # timed out, some batches through): the next send skips what is there.
        self._unsure = False

    def _experiment(self) -> str:
        found = self._client.get_experiment_by_name(self._settings.project)
        if found is not None:
            return found.experiment_id
        return self._client.create_experiment(self._settings.project)

    def group_run(self, group: str) -> str:
        """The id of `group`'s parent run, made if there is none yet."""
        experiment = self._experiment()
        found = self._client.search_runs(
            [experiment], filter_string=f"tags.`{GROUP_TAG}` = '{group}'",
            order_by=["attributes.start_time ASC"], max_results=1)
        if found:
            return found[0].info.run_id
        return self._client.create_run(experiment, run_name=group,
                                       tags={GROUP_TAG: group}).info.run_id

    def open(self, run_id: Optional[str], tags: Dict[str, str], directory: str) -> str:
        del directory  # MLflow keeps the files at its tracking URI
        if run_id is None:
            if self._settings.group:
                tags = dict(tags, **{"mlflow.parentRunId": self.group_run(self._settings.group)})
            run_id = self._client.create_run(self._experiment(), run_name=self._settings.name,
                                             tags=tags).info.run_id
        else:
            self._client.update_run(run_id, status="RUNNING")
            for key, value in tags.items():
                self._client.set_tag(run_id, key, value)
        self.run_id = run_id
        return run_id

    def log_params(self, params: Dict[str, str]) -> None:
        known = self._client.get_run(self.run_id).data.params
        new = {key: str(value)[:_PARAM_CHARS] for key, value in params.items()}
        for key, value in new.items():
            if key in known and known[key] != value:  # MLflow refuses changing a parameter
                self._client.set_tag(self.run_id, f"resumed_with.{key}", value)
        fresh = [self._entities.Param(key, value) for key, value in new.items()
                 if key not in known]
        for start in range(0, len(fresh), 100):
            self._client.log_batch(self.run_id, params=fresh[start:start + 100])

    def log_points(self, points: Sequence[Point]) -> None:
        if self._unsure:
            points = self._not_stored(points)
        now = int(time.time() * 1000)
        metrics = [self._entities.Metric(tag, float(value), now, int(step))
                   for tag, step, value in points]
        self._unsure = True
        for start in range(0, len(metrics), 1000):
            self._client.log_batch(self.run_id, metrics=metrics[start:start + 1000])
        self._unsure = False

    def _not_stored(self, points: Sequence[Point]) -> List[Point]:
        """`points` less those the run holds already (same tag, step and value)."""
        stored = set()
        for tag in {point.tag for point in points}:
            stored.update((tag, metric.step, metric.value)
                          for metric in self._client.get_metric_history(self.run_id, tag))
        return [point for point in points
                if (point.tag, int(point.env_steps), float(point.value)) not in stored]

    def log_file(self, path: str, folder: Optional[str] = None) -> None:
        if os.path.isdir(path):
            self._client.log_artifacts(self.run_id, path, os.path.join(
                folder or "", os.path.basename(path)))
        else:
            self._client.log_artifact(self.run_id, path, folder)

    def close(self, exit_code: int) -> None:
        status = "FINISHED" if exit_code == 0 else "KILLED" if exit_code > 128 else "FAILED"
        self._client.set_terminated(self.run_id, status)


class WandbTracker:
    """A W&B run, offline unless `WANDB_MODE` says otherwise, plotted against env steps."""

    def __init__(self, settings: TrackerSettings):
        self._wandb = extras.require("wandb", "wandb", "--tracker=wandb")
        self._settings = settings
        self._run = None

    def open(self, run_id: Optional[str], tags: Dict[str, str], directory: str) -> str:
        wandb = self._wandb
        mode = os.environ.get("WANDB_MODE", "offline")
        # Offline, a resumed run is a new folder under the same id (W&B warns at
        # resume=): `wandb sync` of both continues the one run.
        resume = {} if mode == "offline" else dict(resume="allow")
        self._run = wandb.init(
            project=self._settings.project, group=self._settings.group,
            name=self._settings.name, id=run_id or wandb.util.generate_id(), **resume,
            dir=directory, mode=mode,
            config={"provenance": tags}, tags=[f"{key}:{value}"[:64] for key, value
                                               in tags.items() if key == "commit"],
            settings=wandb.Settings(silent=True, console="off"))
        self._run.define_metric("env_steps")
        self._run.define_metric("*", step_metric="env_steps")
        return self._run.id

    def log_params(self, params: Dict[str, str]) -> None:
        self._run.config.update(params, allow_val_change=True)

    def log_points(self, points: Sequence[Point]) -> None:
        by_step: Dict[int, Dict[str, float]] = {}
        for tag, step, value in points:
            by_step.setdefault(int(step), {})[tag] = float(value)
        for step in sorted(by_step):
            self._run.log(dict(by_step[step], env_steps=step))

    def log_file(self, path: str, folder: Optional[str] = None) -> None:
        if os.path.isdir(path):
            artifact = self._wandb.Artifact(os.path.basename(path), type="model")
            with contextlib.redirect_stderr(io.StringIO()):  # its "Adding directory..." line
                artifact.add_dir(path)
            self._run.log_artifact(artifact)
        else:
            self._run.save(path, base_path=os.path.dirname(path), policy="now")

    def close(self, exit_code: int) -> None:
        self._run.finish(exit_code=exit_code)


CLIENTS = {client.__name__: client for client in (MlflowTracker, WandbTracker)}


def make_tracker(settings: TrackerSettings) -> Tracker:
    """The client for `settings.kind` (a tracker of `settings.TRACKERS` but "none")."""
    return CLIENTS[TRACKERS[settings.kind].client](settings)


def make_groups_ahead(settings: TrackerSettings, groups: List[str]) -> None:
    """Makes the MLflow parent runs of `groups` before their runs start, so that runs
    started together do not each make one; best effort (one warning line): a run
    makes its group where this could not."""
    if settings.kind != "mlflow":
        return
    try:
        tracker = MlflowTracker(settings)
        for group in groups:
            tracker.group_run(group)
    except Exception as error:  # pylint: disable=broad-except
        first = str(error).strip().splitlines()
        logging.warning("Tracker mlflow: the group runs not made ahead (%s)",
                        first[0] if first else type(error).__name__)
