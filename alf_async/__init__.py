"""alf_async: an asynchronous actor-learner RL trainer for TensorFlow 2.

Importing the package keeps start-up quiet: TensorFlow's C++ INFO lines (the
CPU-feature banner) are off unless `TF_CPP_MIN_LOG_LEVEL` is set, and the old
`gym` that tf-agents imports (alf_async uses gymnasium) is imported here with
its "unmaintained" notice held back, and the `distutils` they both use is
Python's own, not setuptools' (whose import costs every start ~0.2 s). Warnings and errors still show.
Without a display, MuJoCo renders through EGL (`MUJOCO_GL`, unless set).

Run as a command (`python -m alf_async.<command>`), a Ctrl-C before the
command installs its own handler (while TensorFlow is imported, say) ends
it with one line and exit status 130, not a traceback.
"""

import contextlib
import io
import os
import signal
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# MuJoCo renders (evaluation videos, play --gif) off-screen through EGL where there
# is no display; read when mujoco is first imported, so set before anything does.
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")


def _exit_on_interrupt(signum, frame) -> None:
    del frame
    # The process's own stderr: sys.stderr may be redirected (the old gym's import below).
    os.write(2, f"Interrupted by {signal.Signals(signum).name}: exiting\n".encode())
    os._exit(128 + signum)  # nothing to clean up yet: no thread, no file of ours


def _use_pythons_own_distutils() -> None:
    # tf-agents and the old gym import `distutils.version`. setuptools' import hook
    # would answer with setuptools' copy, importing all of setuptools first (~0.2 s
    # of every start); Python 3.11's own distutils serves that import as well.
    # A later `import setuptools` swaps in its copy, as it would anyway, with no warning.
    shim = sys.modules.get("_distutils_hack")
    if shim is not None and "distutils" not in sys.modules and hasattr(shim, "remove_shim"):
        shim.remove_shim()
        warnings.filterwarnings("ignore", "(Setuptools is replacing distutils|Distutils was "
                                "imported before Setuptools)", UserWarning)


def _import_old_gym_quietly() -> None:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import gym  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        pass


# While `python -m alf_async.<command>` locates its module, sys.argv[0] is "-m".
if sys.argv[:1] == ["-m"]:
    signal.signal(signal.SIGINT, _exit_on_interrupt)
_use_pythons_own_distutils()
_import_old_gym_quietly()
