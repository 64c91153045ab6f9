"""tools/backend_restarts.py: the memory it counts below a launch, and a restart's timing."""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools"))
import backend_restarts  # noqa: E402  pylint: disable=wrong-import-position

HOLD = "import sys, time; x = bytearray(int(sys.argv[1]) * 2 ** 20); time.sleep(60)"


def test_memory_counts_every_process_below_and_ray_is_what_is_no_command():
    children = [subprocess.Popen([sys.executable, "-c", HOLD, "60"]),
                subprocess.Popen([sys.executable, "-c", HOLD + "  # alf_async", "40"])]
    try:
        time.sleep(1.5)
        memory = backend_restarts._memory(os.getpid())  # pylint: disable=protected-access
        assert memory["memory_mib"] >= 100
        assert memory["ray_mib"] >= 60  # the child without alf_async in its command line
        assert memory["memory_mib"] - memory["ray_mib"] >= 40
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=10)


def test_a_restart_is_timed_from_the_kill_to_the_pattern_after_it(tmp_path):
    log = tmp_path / "log"
    log.write_text("weights of update 0\n")  # before the kill: not counted
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    writer = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(1.0); "
                               f"open({str(log)!r}, 'a').write('weights of update 7\\n')"])
    try:
        seconds = backend_restarts._restart(  # pylint: disable=protected-access
            writer, backend_restarts._reader(str(log)), victim.pid,  # pylint: disable=protected-access
            r"weights of update \d+")
        assert victim.wait(timeout=10) == -signal.SIGKILL
        assert 0.5 <= seconds <= 10.0
    finally:
        for proc in (victim, writer):
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
