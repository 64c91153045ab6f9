"""What every command checks first: its gin files and bindings, and its run directory.

Light on purpose (gin only): the actor process and the tools read their
configuration through it without importing the trainer.
"""

import logging as std_logging
import os
import tempfile
from typing import Sequence

import gin

from alf_async import quiet


def check_gin_files(gin_files: Sequence[str]) -> None:
    """Raises ValueError naming the first of `gin_files` that is not a file."""
    for path in gin_files:
        if not os.path.isfile(path):
            raise ValueError(f"--gin_file={path} does not exist")


def parse_config(gin_files: Sequence[str], bindings: Sequence[str]) -> None:
    """Parses gin files, then bindings; a file may `include` its neighbours by name.

    Raises:
        ValueError: a file that does not exist (named as `--gin_file=...`),
            or gin's own error for a bad binding.
    """
    check_gin_files(gin_files)
    for path in gin_files:
        gin.add_config_file_search_path(os.path.dirname(os.path.abspath(path)))
    # gin first looks an included name up as a Python package path and logs the miss
    # as an error before finding it on the search path: held back.
    with quiet.held_back("gin/resource_reader.py", below=std_logging.CRITICAL):
        gin.parse_config_files_and_bindings(list(gin_files), list(bindings))


def check_writable(root_dir: str) -> str:
    """Creates `root_dir` if needed; raises ValueError if it is not writable.

    Returns:
        `root_dir` as an absolute path.
    """
    root_dir = os.path.abspath(os.path.expanduser(root_dir))
    try:
        os.makedirs(root_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=root_dir):
            pass
    except OSError as error:
        raise ValueError(f"root_dir={root_dir!r} is not writable: {error.strerror}") from None
    return root_dir


def configured(name: str, default):
    """The gin binding of `name` (a `@configurable` as the callable itself), or `default`
    where it has none (e.g. `train.algorithm_class` outside `train()`)."""
    try:
        value = gin.query_parameter(name)
    except ValueError:
        return default
    return getattr(value, "scoped_configurable_fn", value)
