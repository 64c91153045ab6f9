"""Optional packages and the pip extras that bring them.

A config that needs a package its install lacks ends with one line naming
our extra (`pip install '.[mujoco]'`), never with another package's hint: for
MuJoCo, gymnasium's own hint (`gymnasium[mujoco]`) would replace the pinned
MuJoCo with one that breaks it.
"""

import importlib
import importlib.util
from typing import Optional


# gymnasium entry-point package -> our extra that installs what it needs
_ENV_EXTRAS = {"gymnasium.envs.mujoco": "mujoco", "gymnasium.envs.box2d": "box2d"}
# id prefix -> the extra that registers those ids
_ID_EXTRAS = {"ALE/": "atari", "MinAtar/": "minatar"}


class MissingExtraError(ValueError):
    """A setting needs an optional package: the message names our pip extra."""


def missing(setting: str, extra: str) -> MissingExtraError:
    """The error for `setting` (e.g. "create_environment.env_name='Hopper-v4'")."""
    return MissingExtraError(f"{setting} needs the [{extra}] extra: pip install '.[{extra}]'")


def require(module: str, extra: str, setting: str):
    """Imports `module`, or raises `MissingExtraError` naming `setting` and `extra`."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise missing(setting, extra) from None


def check_installed(module: str, extra: str, setting: str) -> None:
    """Raises `MissingExtraError` naming `setting` and `extra` unless `module` can be
    imported, without importing it (a command checks what its children need)."""
    if importlib.util.find_spec(module) is None:
        raise missing(setting, extra)


def import_reverb(setting: str):
    """The `reverb` module (the [replay] extra; [distributed] installs the same)."""
    return require("reverb", "replay", setting)


def trajectory_dataset(reverb, address: str, table: str, **kwargs):
    """`reverb.TrajectoryDataset.from_table_signature(address, table, **kwargs)`
    without tf.data's autotuning.

    Destroying an iterator waits, holding the GIL, for the tf.data thread its
    root starts, which is autotuning's model thread: the whole learner stood
    still 15-35 s at the end of training in 1 to 3 of 5 runs on a busy 2-core
    machine (`py-spy dump --native`: the destructor in `RootDataset::Iterator`
    -> `~LogicalThreadWrapper`). A Reverb source has nothing to tune.
    """
    options = importlib.import_module("tensorflow").data.Options()
    options.autotune.enabled = False
    return reverb.TrajectoryDataset.from_table_signature(address, table, **kwargs).with_options(
        options)


def pyplot(setting: str, extra: str = "plot"):
    """matplotlib's `pyplot` on the file-only Agg backend, or `MissingExtraError`
    naming `setting` (the command or tool that plots) and `extra`."""
    matplotlib = require("matplotlib", extra, setting)
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def env_extra(env_name: str) -> Optional[str]:
    """The extra a gymnasium id needs, if it is one of ours (None: none or unknown)."""
    for prefix, extra in _ID_EXTRAS.items():
        if env_name.startswith(prefix):
            return extra
    import gymnasium as gym  # pylint: disable=import-outside-toplevel
    try:
        entry_point = str(gym.spec(env_name).entry_point)
    except gym.error.Error:
        return None
    return next((extra for package, extra in _ENV_EXTRAS.items()
                 if entry_point.startswith(package)), None)
