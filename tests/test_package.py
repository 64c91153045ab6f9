"""`alf_async/__init__.py`: the interrupt handler it installs for `python -m alf_async.<command>`."""

import subprocess
import sys

CODE = """
import contextlib, io, signal
import alf_async
with contextlib.redirect_stderr(io.StringIO()):  # as while the old gym is imported
    alf_async._exit_on_interrupt(signal.SIGINT, None)
"""


def test_the_interrupt_line_reaches_the_terminal_while_stderr_is_redirected():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 130
    assert result.stderr.strip().splitlines()[-1] == "Interrupted by SIGINT: exiting"
