"""What a recorded dataset's metadata says made it, and whether a run may append to it.

The metadata (TFDS's `metadata.json`, `builder.info.metadata`) holds:
- `env_name`, `observation_spec` and `action_spec` (shape, dtype, bounds);
- `producer`: `kind` (`train` or `play`), the producing run's `root_dir`,
  the `commit`, the `gin_files` and their `gin_sha256`, and its
  `run_settings` (`run_settings.json`'s records);
- `weights_digest` and `policy_version` of the policy that acted last
  (each step keeps the `policy_version` that acted on it);
- `episodes` and `steps`, kept current as shards are written.
"""

import os
from typing import Dict, Optional

import numpy as np
from tf_agents.specs import tensor_spec


def spec_json(spec) -> Dict:
    """An unbatched tensor spec as JSON values: shape, dtype and, if bounded, bounds."""
    spec = tensor_spec.from_spec(spec)
    record = {"shape": [int(d) for d in spec.shape], "dtype": spec.dtype.name}
    if hasattr(spec, "minimum"):
        bound = lambda x: np.asarray(x).tolist()
        record.update(minimum=bound(spec.minimum), maximum=bound(spec.maximum))
    return record


def dataset_metadata(env_name: str, observation_spec, action_spec, producer: Dict) -> Dict:
    """The metadata a dataset starts with (the counts and the digest come later)."""
    return {"env_name": env_name, "observation_spec": spec_json(observation_spec),
            "action_spec": spec_json(action_spec), "producer": dict(producer)}


def same_producer(ours: Dict) -> callable:
    """`their metadata -> None` where a writer with metadata `ours` may append to a
    dataset (the same kind of producer, the same run's root_dir, env and specs),
    else the reason it may not."""
    def check(theirs: Dict) -> Optional[str]:
        producer, mine = theirs.get("producer") or {}, ours["producer"]
        if (producer.get("kind"), _path(producer.get("root_dir"))) != (
                mine["kind"], _path(mine["root_dir"])):
            return (f"recorded by {producer.get('kind', 'another tool')} of "
                    f"{producer.get('root_dir', 'an unknown run')}")
        for key in ("env_name", "observation_spec", "action_spec"):
            if theirs.get(key) != ours[key]:
                return f"its {key} is {theirs.get(key)!r}, this run's {ours[key]!r}"
        return None
    return check


def _path(path: Optional[str]) -> Optional[str]:
    return path and os.path.realpath(path)
