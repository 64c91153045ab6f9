"""A run's settings records, light (no TensorFlow, no gin), and their reader.

`training.settings` builds these records from gin for a run (its
`RunSettings` is `RunRecord` plus the algorithm's class) and writes them to
`root_dir/run_settings.json`; the commands that read a run from outside (the
chaos tool, the experiment report, `play`, PBT) read them back here as the same
typed records, the algorithm by its name.

Thread-safety: frozen records; `read_records` reads one file.
"""

import dataclasses
from typing import Optional

from alf_async.runs import layout


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What `train()` does with a run, less its algorithm: budget, seed and intervals
    (gin's `train.*`, `training.settings.RunSettings`).

    Attributes:
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
class DriverSizes:
    """The collection's sizes: `AsyncOffPolicyDriver`'s (its defaults; the rules:
    `drivers.check_sizes`). `training.assembly.run_settings()` reads them from gin.

    Attributes:
        num_envs: E, env threads (of each actor process, with remote actors).
        num_actor_queues: N, actor threads (0: each env thread acts itself).
        unroll_length: T, steps per unroll.
        learn_queue_cap: Q, unrolls per learn batch.
        actor_queue_cap: A, most requests one policy call serves.
    """
    num_envs: int
    num_actor_queues: int
    unroll_length: int
    learn_queue_cap: int
    actor_queue_cap: int


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
class Recorded:
    """A run's records as its `run_settings.json` holds them: `training.settings.Settings`
    with the algorithm by its class name (`algorithm`)."""
    algorithm: str
    run: RunRecord
    sizes: DriverSizes
    replay: ReplaySettings
    env: EnvSettings

    def to_json(self) -> dict:
        """As `run_settings.json` holds it (`read_records`' inverse)."""
        records = {name: dataclasses.asdict(getattr(self, name))
                   for name in ("run", "sizes", "replay", "env")}
        records["run"]["algorithm_class"] = self.algorithm
        return records


def read_records(root_dir: str) -> Optional[Recorded]:
    """The records `root_dir/run_settings.json` holds, or None where the run has not
    started (no such file)."""
    recorded = layout.read_settings(root_dir)
    if recorded is None:
        return None
    run = dict(recorded["run"])
    algorithm = run.pop("algorithm_class")
    return Recorded(algorithm, RunRecord(**run), DriverSizes(**recorded["sizes"]),
                    ReplaySettings(**recorded["replay"]), EnvSettings(**recorded["env"]))
