"""A run's settings as frozen, typed records, and their file `root_dir/run_settings.json`.

Gin is the front end: `RunSettings` is the configurable that gin files bind
as `train.*`, and `training.assembly.run_settings()` reads the rest from
gin's bindings, once, into `DriverSizes` (the driver's record, in
`alf_async.drivers`), `ReplaySettings` and `EnvSettings`. Every reader gets the record it needs from its caller;
no module asks gin for another component's setting.

`run_settings.json` records the values (JSON: the algorithm by its name)
for the tools that read a run from outside (the chaos ledger, the
experiment report, `play`), so that none of them parses gin text.
"""

import dataclasses
import json
import os
from typing import Callable, Optional

import gin

from alf_async.algorithms import PPOAlgorithm
from alf_async.drivers import DriverSizes
from alf_async.runs import layout


@gin.configurable("train", module="alf_async")
@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What `train()` does with a run: its algorithm, budget, seed and intervals.

    Gin binds these as `train.<field>` (e.g. `train.num_env_steps = 500000`).

    Attributes:
        algorithm_class: `fn(time_step_spec, action_spec)` -> algorithm.
        num_iterations: stop after this many learner iterations (None: no limit).
        num_env_steps: stop after this many env steps (None: no limit).
        stop_at_return: stop once the average return reaches it (None: never).
        report_return: log when the average return first reaches it (kept
            across resumes).
        seed: global seed for TensorFlow and the envs (None: random).
        summary_interval: iterations between summaries (the average return
            against env steps is written every iteration).
        checkpoint_interval: iterations between checkpoints.
        checkpoint_retries: failed checkpoint writes in a row that training
            survives (each is one error line, the previous checkpoint stays);
            one more stops it (0: stop at the first).
        max_checkpoints: checkpoints kept on disk.
        log_interval_secs: seconds between console progress lines.
        progress_event_secs: seconds between `progress` run events (None: one with
            every console line).
        eval_interval: iterations between greedy evaluations (0: none).
        num_eval_episodes: episodes per evaluation, played in parallel on a
            separate env.
        eval_video_interval: every this many evaluations, one greedy episode
            is recorded as `root_dir/videos/eval_<env steps>.gif` and shown in
            TensorBoard (`eval/video`) and the tracker (0: none).
        serve_port: collect with actor processes (`python -m alf_async.actor
            --server=THIS_HOST:PORT`) through a Reverb server on this port
            (0: a free one) instead of env threads here (None).
        record_dataset: write every episode collected (by env threads or
            actor processes) into this RLDS dataset directory (None: none;
            the `[datasets]` extra). A resumed run appends to its own.
    """
    algorithm_class: Callable = PPOAlgorithm
    num_iterations: Optional[int] = None
    num_env_steps: Optional[int] = 1_000_000
    stop_at_return: Optional[float] = None
    report_return: Optional[float] = 475.0
    seed: Optional[int] = None
    summary_interval: int = 10
    checkpoint_interval: int = 100
    checkpoint_retries: int = 3
    max_checkpoints: int = 3
    log_interval_secs: float = 5.0
    progress_event_secs: Optional[float] = None
    eval_interval: int = 0
    num_eval_episodes: int = 10
    eval_video_interval: int = 0
    serve_port: Optional[int] = None
    record_dataset: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ReplaySettings:
    """Where learn batches come from, and whether that source keeps state on disk.

    Attributes:
        exp_replayer: a name in `batches.registry.SOURCES` (`AsyncOffPolicyDriver`'s).
        save_buffer: a replay buffer kept in `root_dir/replay` (`ReplayBuffer`'s).
    """
    exp_replayer: str
    save_buffer: bool

    @property
    def keeps_state(self) -> bool:
        """Whether the learn-batch source (a replay, or fresh batches' mix-in replay)
        reads and writes state in root_dir: building the run then reads it."""
        return bool(self.save_buffer)


@dataclasses.dataclass(frozen=True)
class EnvSettings:
    """The env a run trains on (`create_environment`'s).

    Attributes:
        env_name: the env id (a gymnasium id by default).
        num_parallel_environments: B, sub-envs per env thread.
    """
    env_name: str
    num_parallel_environments: int


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every record of one run, as `assembly.run_settings()` builds them."""
    run: RunSettings
    sizes: DriverSizes
    replay: ReplaySettings
    env: EnvSettings

    def to_json(self) -> dict:
        """The records as JSON values (`{"run": {...}, "sizes": {...}, ...}`); the
        algorithm by its class name."""
        records = {field.name: dataclasses.asdict(getattr(self, field.name))
                   for field in dataclasses.fields(self)}
        algorithm = self.run.algorithm_class
        records["run"]["algorithm_class"] = getattr(algorithm, "__name__", repr(algorithm))
        return records


def write_settings(root_dir: str, settings: Settings) -> None:
    """Writes `root_dir/run_settings.json` (atomically; overwritten at each start)."""
    layout.write_text(os.path.join(root_dir, layout.SETTINGS_FILE),
                     json.dumps(settings.to_json(), indent=1, sort_keys=True) + "\n")
