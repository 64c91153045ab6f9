import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = """
import os, sys
from alf_async import quiet
os.write(2, b"before\\n")
with quiet.native_stderr_held():
    os.write(2, b"native chatter\\n")
    with quiet.native_stderr_held():
        os.write(2, b"nested chatter\\n")
    os.write(2, b"still held\\n")
os.write(2, b"after\\n")
"""


def test_native_stderr_is_dropped_inside_the_hold_only():
    result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["before", "after"]
