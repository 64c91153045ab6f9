"""A stand-in for a supervised process: `python tests/fake_child.py LEDGER MODE [ARG]`.

Appends `start <pid>` to the file LEDGER once its SIGTERM handling is in place, and:
- `exit N`: exits with status N;
- `exit_once FILE`: exits 0 once the ledger FILE holds a `start` line (another child is up);
- `serve`: waits for SIGTERM, appends `term <pid>` and exits ARG (0 by default);
- `stubborn`: ignores SIGTERM and waits (only SIGKILL ends it);
- `parent`: starts a `serve` grandchild (appending `child <pid>`) and waits.

`run()` is the same with `sys.argv`: the entry an `alf_async.supervision.spare` calls
(`python -m alf_async.supervision.spare fake_child LEDGER MODE`, with tests/ on the path).
"""

import os
import signal
import subprocess
import sys
import time


def _note(ledger: str, line: str) -> None:
    with open(ledger, "a") as out:
        out.write(line + "\n")


def _started(ledger: str) -> bool:
    try:
        with open(ledger) as f:
            return any(line.startswith("start ") for line in f)
    except FileNotFoundError:
        return False


def main(ledger: str, mode: str, arg: str = "0") -> None:
    if mode == "exit":
        _note(ledger, f"start {os.getpid()}")
        sys.exit(int(arg))
    if mode == "exit_once":
        _note(ledger, f"start {os.getpid()}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _started(arg):
            time.sleep(0.02)
        sys.exit(0)
    if mode == "serve":
        signal.signal(signal.SIGTERM, lambda *_: (_note(ledger, f"term {os.getpid()}"),
                                                  sys.exit(int(arg))))
    elif mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif mode == "parent":
        grandchild = subprocess.Popen([sys.executable, __file__, ledger, "serve"])
        _note(ledger, f"child {grandchild.pid}")
    _note(ledger, f"start {os.getpid()}")  # its SIGTERM handler in place
    deadline = time.monotonic() + 120  # never outlives a test by long
    while time.monotonic() < deadline:
        time.sleep(0.05)


def run() -> None:
    main(*sys.argv[1:])


if __name__ == "__main__":
    run()
