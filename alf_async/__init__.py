"""alf_async: an asynchronous actor-learner RL trainer for TensorFlow 2.

Importing the package keeps start-up quiet: TensorFlow's C++ INFO lines (the
CPU-feature banner) are off unless `TF_CPP_MIN_LOG_LEVEL` is set, and the old
`gym` that tf-agents imports (alf_async uses gymnasium) is imported here with
its "unmaintained" notice held back. Warnings and errors still show.

Run as a command (`python -m alf_async.<command>`), a Ctrl-C before the
command installs its own handler (while TensorFlow is imported, say) ends
it with one line and exit status 130, not a traceback.
"""

import contextlib
import io
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _exit_on_interrupt(signum, frame) -> None:
    del frame
    # The process's own stderr: sys.stderr may be redirected (the old gym's import below).
    os.write(2, f"Interrupted by {signal.Signals(signum).name}: exiting\n".encode())
    os._exit(128 + signum)  # nothing to clean up yet: no thread, no file of ours


def _import_old_gym_quietly() -> None:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import gym  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        pass


# While `python -m alf_async.<command>` locates its module, sys.argv[0] is "-m".
if sys.argv[:1] == ["-m"]:
    signal.signal(signal.SIGINT, _exit_on_interrupt)
_import_old_gym_quietly()
