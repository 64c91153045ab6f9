"""`alf_async.supervision.spare`: a process that waits, warm and idle, until promoted into its command.

The spares here run `tests/fake_child.py` (module `fake_child`); every wait is
bounded and every process is killed by its PID in a `finally`.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from alf_async.supervision.spare import (NORMAL_PRIORITY, PROMOTE, READY_NAME, SPARE_NAME,
                                        is_ready, waiting)

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fake_child.py


def start_spare(ledger, mode, arg="0"):
    """A spare of `fake_child LEDGER MODE ARG`, its input a pipe."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "alf_async.supervision.spare", "fake_child",
                             str(ledger), mode, arg], stdin=subprocess.PIPE, env=env)


def comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def ledger_lines(ledger):
    return open(ledger).read().split() if os.path.exists(ledger) else []


@pytest.fixture
def spares():
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_waiting_spare_is_named_idle_and_runs_nothing(tmp_path, spares):
    ledger = tmp_path / "ledger"
    spares.append(spare := start_spare(ledger, "exit", "3"))
    wait_for(lambda: comm(spare.pid) == READY_NAME)  # imported, waiting: ready
    assert is_ready(spare.pid)
    assert os.sched_getscheduler(spare.pid) == os.SCHED_IDLE
    time.sleep(0.5)
    assert spare.poll() is None and ledger_lines(ledger) == []


def test_a_promoted_spare_runs_its_command_at_normal_priority(tmp_path, spares):
    ledger = tmp_path / "ledger"
    spares.append(spare := start_spare(ledger, "serve"))
    wait_for(lambda: comm(spare.pid) == READY_NAME)
    spare.stdin.write(PROMOTE)
    spare.stdin.close()
    wait_for(lambda: ledger_lines(ledger) == ["start", str(spare.pid)])
    assert comm(spare.pid) == "fake_child.py"
    tasks = os.listdir(f"/proc/{spare.pid}/task")
    assert {os.sched_getscheduler(int(tid)) for tid in tasks} == {os.SCHED_OTHER}
    os.kill(spare.pid, signal.SIGTERM)  # `serve` exits 0 on SIGTERM
    assert spare.wait(timeout=10) == 0


def test_a_promoted_spare_exits_with_its_commands_status(tmp_path, spares):
    ledger = tmp_path / "ledger"
    spares.append(spare := start_spare(ledger, "exit", "3"))
    spare.stdin.write(PROMOTE)
    spare.stdin.close()
    assert spare.wait(timeout=30) == 3
    assert ledger_lines(ledger) == ["start", str(spare.pid)]


def test_a_spare_whose_input_ends_exits_0_and_runs_nothing(tmp_path, spares):
    ledger = tmp_path / "ledger"
    spares.append(spare := start_spare(ledger, "exit", "3"))
    spare.stdin.close()  # its supervisor is gone
    assert spare.wait(timeout=30) == 0
    assert ledger_lines(ledger) == []


def test_a_spare_promoted_during_its_import_finishes_it_at_normal_priority(tmp_path, spares):
    """The word arrives while the import (a module that waits for a file) still runs."""
    release = tmp_path / "release"
    (tmp_path / "slow_child.py").write_text(textwrap.dedent(f"""
        import os, time
        deadline = time.monotonic() + 60
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.02)
        from fake_child import run  # noqa
        """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), TESTS]))
    ledger = tmp_path / "ledger"
    spares.append(spare := subprocess.Popen(
        [sys.executable, "-m", "alf_async.supervision.spare", "slow_child", str(ledger), "serve"],
        stdin=subprocess.PIPE, env=env))
    wait_for(lambda: os.sched_getscheduler(spare.pid) == os.SCHED_IDLE)
    wait_for(lambda: len(os.listdir(f"/proc/{spare.pid}/task")) > 1)  # the import thread
    spare.stdin.write(PROMOTE)
    spare.stdin.close()
    wait_for(lambda: {os.sched_getscheduler(int(tid)) for tid in
                      os.listdir(f"/proc/{spare.pid}/task")} == {os.SCHED_OTHER})
    assert ledger_lines(ledger) == []  # still importing
    release.touch()
    wait_for(lambda: ledger_lines(ledger) == ["start", str(spare.pid)])


def _ahead_spare(tmp_path, spares):
    """A spare of a module that runs ahead: notes `ready`, awaits, then notes `start`."""
    (tmp_path / "ahead_child.py").write_text(textwrap.dedent("""
        import os, sys
        from absl import app
        from alf_async.supervision import promotion
        RUNS_AHEAD = True
        def note(line):
            with open(sys.argv[1], "a") as out:
                out.write(line + "\\n")
        def main(argv):
            comm = open("/proc/self/comm").read().strip()  # absl's app.run renames it
            note(f"ready {promotion.pending()} {comm}")
            promotion.await_promotion()
            note(f"start {promotion.pending()} {open('/proc/self/comm').read().strip()}")
        def run():
            app.run(main)
        """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), TESTS]))
    ledger = tmp_path / "ledger"
    spares.append(spare := subprocess.Popen(
        [sys.executable, "-m", "alf_async.supervision.spare", "ahead_child", str(ledger)],
        stdin=subprocess.PIPE, env=env))
    return spare, ledger


def test_a_module_that_runs_ahead_gets_ready_idle_and_acts_only_once_promoted(
        tmp_path, spares):
    spare, ledger = _ahead_spare(tmp_path, spares)
    ready = ["ready", "True", SPARE_NAME]
    wait_for(lambda: ledger_lines(ledger) == ready)
    assert os.sched_getscheduler(spare.pid) == os.SCHED_IDLE
    wait_for(lambda: comm(spare.pid) == READY_NAME)  # ready, and not a promoted process
    time.sleep(0.3)
    assert ledger_lines(ledger) == ready and spare.poll() is None
    spare.stdin.write(PROMOTE)
    spare.stdin.close()
    assert spare.wait(timeout=30) == 0
    assert ledger_lines(ledger) == [*ready, "start", "False", "ahead_child.py"]


def test_a_spare_that_ran_ahead_exits_0_without_acting_when_its_input_ends(tmp_path, spares):
    spare, ledger = _ahead_spare(tmp_path, spares)
    wait_for(lambda: ledger_lines(ledger) == ["ready", "True", SPARE_NAME])
    spare.stdin.close()
    assert spare.wait(timeout=30) == 0
    assert ledger_lines(ledger) == ["ready", "True", SPARE_NAME]


def test_waiting_tells_a_spare_that_waits_from_a_promoted_one_and_from_others():
    spare = ["python", "-m", "alf_async.supervision.spare", "alf_async.train", "--root_dir=x"]
    assert waiting(spare, "python")  # not yet named: still starting, idle
    assert waiting(spare, SPARE_NAME)
    assert not waiting(spare, "train.py")  # promoted
    assert not waiting(["python", "-m", "alf_async.train", "--root_dir=x"], "train.py")
    normal = ["python", "-m", "alf_async.supervision.spare", NORMAL_PRIORITY, "alf_async.train", "--x"]
    assert waiting(normal, SPARE_NAME) and not waiting(normal, "train.py")


def test_a_normal_priority_spare_waits_at_normal_priority_and_runs_nothing(tmp_path, spares):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    ledger = tmp_path / "ledger"
    spares.append(spare := subprocess.Popen(
        [sys.executable, "-m", "alf_async.supervision.spare", NORMAL_PRIORITY, "fake_child", str(ledger),
         "exit", "3"], stdin=subprocess.PIPE, env=env))
    wait_for(lambda: comm(spare.pid) == READY_NAME)
    assert os.sched_getscheduler(spare.pid) == os.SCHED_OTHER
    time.sleep(0.3)
    assert spare.poll() is None and ledger_lines(ledger) == []
    spare.stdin.write(PROMOTE)
    spare.stdin.close()
    assert spare.wait(timeout=30) == 3
