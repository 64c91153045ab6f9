"""alf_async: an asynchronous actor-learner RL trainer for TensorFlow 2.

Importing the package keeps start-up quiet: TensorFlow's C++ INFO lines (the
CPU-feature banner) are off unless `TF_CPP_MIN_LOG_LEVEL` is set, and the old
`gym` that tf-agents imports (alf_async uses gymnasium) is imported here with
its "unmaintained" notice held back. Warnings and errors still show.
"""

import contextlib
import io
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _import_old_gym_quietly() -> None:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import gym  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        pass


_import_old_gym_quietly()
