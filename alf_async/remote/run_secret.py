"""The run's secret: what tells the run's own actors' unrolls from anyone else's.

Reverb's server listens on every interface and has no authentication of its
own. Each unroll carries the run's secret (a random 63-bit integer); the
learner's reader refuses and counts an unroll without it (`ReverbService`).
The secret is `ALF_ASYNC_RUN_SECRET` where set, else the file `run_secret`
(mode 0600) in the learner's root_dir, made by the first process that needs
it (the launch, or `train --serve_port`). Actors read it from the same file
(`--root_dir`, on a shared filesystem) or from the variable.

It keeps out clients that are not the run's; it is no encryption: whoever
reads the network between actors and learner reads it too (the threat model
in docs/reliability.md).
"""

import os
import secrets
from typing import Optional

ENV_VAR = "ALF_ASYNC_RUN_SECRET"
SECRET_FILE = "run_secret"


def _parse(text: str, where: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{where} must hold the run's secret, an integer") from None


def _read(root_dir: str) -> Optional[int]:
    path = os.path.join(root_dir, SECRET_FILE)
    try:
        with open(path) as f:
            return _parse(f.read(), path)
    except FileNotFoundError:
        return None


def for_learner(root_dir: Optional[str]) -> int:
    """The run's secret: `ALF_ASYNC_RUN_SECRET`, else `root_dir/run_secret`, made
    (mode 0600) if missing; a root_dir of None: a new secret only this process
    knows (actors then need the variable)."""
    if os.environ.get(ENV_VAR):
        return _parse(os.environ[ENV_VAR], ENV_VAR)
    if root_dir is None:
        return secrets.randbits(63)
    known = _read(root_dir)
    if known is not None:
        return known
    os.makedirs(root_dir, exist_ok=True)
    value = secrets.randbits(63)
    try:
        fd = os.open(os.path.join(root_dir, SECRET_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     0o600)
    except FileExistsError:  # another process made it first: its secret is the run's
        return _read(root_dir)
    with os.fdopen(fd, "w") as f:
        f.write(f"{value}\n")
    return value


def for_actor(root_dir: Optional[str]) -> int:
    """The secret an actor sends with its unrolls: `ALF_ASYNC_RUN_SECRET`, else the
    learner's `root_dir/run_secret`.

    Raises:
        ValueError: neither is there (says how to give it).
    """
    if os.environ.get(ENV_VAR):
        return _parse(os.environ[ENV_VAR], ENV_VAR)
    known = _read(root_dir) if root_dir else None
    if known is None:
        raise ValueError(f"no run secret: give the learner's --root_dir (on a shared "
                         f"filesystem; its {SECRET_FILE} file) or set {ENV_VAR} to that "
                         f"file's content")
    return known
