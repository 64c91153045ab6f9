"""A run's `run_settings.json` as a run writes it, for tests that fake a run's folder."""

import json
import os

from alf_async.runs import layout, records


def write_records(root_dir: str, env_name: str = "CartPole-v1", **run) -> records.Recorded:
    """Writes `root_dir/run_settings.json`: PPO on `env_name` with `run`'s `RunRecord`
    fields (the rest their defaults, the sizes and replay of `ppo_async.gin`)."""
    recorded = records.Recorded("PPOAlgorithm", records.RunRecord(**run),
                                records.DriverSizes(2, 1, 32, 2, 1),
                                records.ReplaySettings("one_time", False),
                                records.EnvSettings(env_name, 32))
    with open(os.path.join(root_dir, layout.SETTINGS_FILE), "w") as out:
        json.dump(recorded.to_json(), out)
    return recorded
