"""A run's settings as frozen, typed records, and their file `root_dir/run_settings.json`.

Gin is the front end: `RunSettings` is the configurable that gin files bind
as `train.*`, and `training.assembly.run_settings()` reads the rest from
gin's bindings, once, into `DriverSizes` (the driver's record),
`ReplaySettings` and `EnvSettings` (light records: `runs.records`). Every reader gets the record it needs from its caller;
no module asks gin for another component's setting.

`run_settings.json` records the values (JSON: the algorithm by its name)
for the tools that read a run from outside (the chaos ledger, the
experiment report, `play`), so that none of them parses gin text: they read
it back as the same records, without TensorFlow (`runs.records.read_records`).
"""

import dataclasses
import json
import os
from typing import Callable

import gin

from alf_async.algorithms import PPOAlgorithm
from alf_async.runs import layout
from alf_async.runs.records import (DriverSizes, EnvSettings, Recorded, ReplaySettings,
                                    RunRecord)


@gin.configurable("train", module="alf_async")
@dataclasses.dataclass(frozen=True)
class RunSettings(RunRecord):
    """What `train()` does with a run: its algorithm, and `RunRecord`'s budget, seed and
    intervals.

    Gin binds these as `train.<field>` (e.g. `train.num_env_steps = 500000`).

    Attributes:
        algorithm_class: `fn(time_step_spec, action_spec)` -> algorithm.
    """
    algorithm_class: Callable = PPOAlgorithm


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every record of one run, as `assembly.run_settings()` builds them."""
    run: RunSettings
    sizes: DriverSizes
    replay: ReplaySettings
    env: EnvSettings

    def to_json(self) -> dict:
        """The records as JSON values (`{"run": {...}, "sizes": {...}, ...}`); the
        algorithm by its class name (`runs.records.Recorded`'s form)."""
        algorithm = self.run.algorithm_class
        run = RunRecord(**{field.name: getattr(self.run, field.name)
                           for field in dataclasses.fields(RunRecord)})
        return Recorded(getattr(algorithm, "__name__", repr(algorithm)), run, self.sizes,
                        self.replay, self.env).to_json()


def write_settings(root_dir: str, settings: Settings) -> None:
    """Writes `root_dir/run_settings.json` (atomically; overwritten at each start)."""
    layout.write_text(os.path.join(root_dir, layout.SETTINGS_FILE),
                     json.dumps(settings.to_json(), indent=1, sort_keys=True) + "\n")
