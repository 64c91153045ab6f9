"""What the processes of a Ray this package starts see on their PYTHONPATH.

Ray 2.60 refuses pydantic 1 at import ("Pydantic v1 is no longer supported in
Ray"), in its dashboard and runtime-env agents; the trackers' extras (mlflow,
wandb) install pydantic 1, the only one beside tf-agents' typing-extensions
pin. Plain Ray runs without pydantic, so this folder, put first on the
PYTHONPATH of Ray's own processes while a Ray starts (`pydantic_hidden`),
holds a `pydantic` that cannot be imported. The commands a `CommandHost`
runs get the PYTHONPATH back without it (`without_this_folder`): a learner
reports to its tracker. In this process Ray's pydantic check is imported once
with pydantic hidden (`import_ray_without_pydantic`): the rest of the
process keeps pydantic (an MLflow client beside a Ray driver).
"""

import contextlib
import importlib
import os
import sys
from typing import Dict, Iterator, Mapping

FOLDER = os.path.dirname(os.path.abspath(__file__))


def _paths(env: Mapping[str, str]):
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != FOLDER]


@contextlib.contextmanager
def pydantic_hidden() -> Iterator[None]:
    """While the block runs (a Ray starts: its processes take this environment),
    this folder leads `PYTHONPATH`; restored after."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([FOLDER, *_paths(os.environ)])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def without_this_folder(env: Mapping[str, str]) -> Dict[str, str]:
    """`env` with this folder taken off its `PYTHONPATH`."""
    clean = dict(env)
    paths = _paths(env)
    if paths:
        clean["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        clean.pop("PYTHONPATH", None)
    return clean


def import_ray_without_pydantic():
    """`ray`, its pydantic check imported while `pydantic` cannot be (it then holds that
    pydantic is not installed, and Ray's serializers skip it); `pydantic` as before."""
    saved = sys.modules.get("pydantic")
    sys.modules["pydantic"] = None  # an import of it raises ImportError
    try:
        ray = importlib.import_module("ray")
        importlib.import_module("ray._common.pydantic_compat")
    finally:
        if saved is None:
            del sys.modules["pydantic"]
        else:
            sys.modules["pydantic"] = saved
    return ray
