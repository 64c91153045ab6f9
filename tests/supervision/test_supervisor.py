"""`Supervisor`: restarts, budgets, stops and orphans, with `tests/fake_child.py` processes.

Every wait is bounded; every process a test starts is killed by its PID in a
`finally` (the supervisor's own `_kill_all` does it for its children).
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from alf_async.supervision.supervisor import (ChildSpec, RestartPolicy, Supervisor, describe_status)

FAKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_child.py")
QUICK = RestartPolicy(max_restarts=2, window_secs=60.0, backoff_secs=0.05,
                      max_backoff_secs=0.2)


def _spec(name, ledger, mode, arg="0", primary=False, finishes=False, gang=None):
    return ChildSpec(name, [sys.executable, FAKE, str(ledger), mode, arg], primary=primary,
                     finishes=finishes, gang=gang)


def _lines(ledger, word):
    if not os.path.exists(ledger):
        return []
    return [int(line.split()[1]) for line in open(ledger) if line.startswith(word + " ")]


def _wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stop_after(condition):
    """A `stop_signal` for `run()`: SIGTERM once `condition()` (checked by the loop)."""
    return lambda: signal.SIGTERM if condition() else None


@pytest.mark.slow
def test_a_failing_child_is_restarted_until_its_budget_then_run_returns_1(tmp_path, caplog):
    ledger = tmp_path / "ledger"
    supervisor = Supervisor([_spec("learner", tmp_path / "l", "serve", primary=True),
                             _spec("actor 0", ledger, "exit", "1")], QUICK)
    status = supervisor.run(lambda: None)  # ends by itself: the budget runs out
    assert status == 1
    assert len(_lines(ledger, "start")) == 3  # the first start and 2 restarts
    restarts = [r.getMessage() for r in caplog.records if "restart" in r.getMessage()]
    assert restarts[0] == "launch: actor 0 exited with exit status 1; restart 1 in 0.1 s"
    assert "restart 2 in 0.1 s" in restarts[1]
    assert ("launch: actor 0 exited with exit status 1 after 2 restart(s): over its budget "
            "of 2 restarts in 60 s") in restarts[2]
    assert _lines(tmp_path / "l", "term"), "the learner was not stopped with SIGTERM"


def test_the_primary_finishing_stops_the_others_with_sigterm_and_returns_0(tmp_path):
    ledger = tmp_path / "ledger"
    status = Supervisor([_spec("learner", tmp_path / "l", "exit_once", str(ledger),
                               primary=True),
                         _spec("actor 0", ledger, "serve")], QUICK).run(lambda: None)
    assert status == 0
    assert _lines(ledger, "start") and _lines(ledger, "term") == _lines(ledger, "start")


def test_a_child_that_finishes_is_done_at_its_exit_0_and_the_others_go_on(tmp_path, caplog):
    """A multi-worker learner's other worker ends with the chief: not restarted, and
    its end does not end the run (a failure of it still restarts it)."""
    caplog.set_level("INFO", logger="absl")  # an earlier test may have set absl to WARNING
    worker, learner = tmp_path / "worker", tmp_path / "learner"
    finished_at = []

    def stop():  # 1 s after the worker's start: ~10 looks at the children
        if _lines(worker, "start") and not finished_at:
            finished_at.append(time.monotonic())
        return signal.SIGTERM if finished_at and time.monotonic() > finished_at[0] + 1 else None

    status = Supervisor([_spec("learner", learner, "serve", primary=True),
                         _spec("learner 1", worker, "exit", "0", finishes=True)],
                        QUICK).run(stop)
    assert status == 128 + signal.SIGTERM  # the run went on until the stop
    assert len(_lines(worker, "start")) == 1 and len(_lines(learner, "term")) == 1
    assert caplog.text.count("launch: learner 1 finished") == 1
    failing = Supervisor([_spec("learner", learner, "serve", primary=True),
                          _spec("learner 1", worker, "exit", "1", finishes=True)], QUICK)
    assert failing.run(lambda: None) == 1  # restarted until its budget
    assert len(_lines(worker, "start")) == 1 + 1 + QUICK.max_restarts


def test_a_gang_member_killed_restarts_the_whole_gang_together_one_line_each(
        tmp_path, caplog):
    """A multi-worker learner's worker killed: the chief (which would wait in its
    all-reduce) is SIGKILLed too, both start again, one line; the actor goes on."""
    caplog.set_level("INFO", logger="absl")
    chief, worker, actor = tmp_path / "chief", tmp_path / "worker", tmp_path / "actor"
    killed, give_up = [], time.monotonic() + 20

    def kill_the_worker_once():
        if len(_lines(worker, "start")) == 1 and _lines(chief, "start") and not killed:
            os.kill(_lines(worker, "start")[0], signal.SIGKILL)
            killed.append(True)
        return (len(_lines(chief, "start")) >= 2 and len(_lines(worker, "start")) >= 2
                or time.monotonic() > give_up)

    status = Supervisor([_spec("learner", chief, "serve", primary=True, gang="learner"),
                         _spec("learner 1", worker, "serve", finishes=True, gang="learner"),
                         _spec("actor 0", actor, "serve")],
                        QUICK).run(_stop_after(kill_the_worker_once))
    assert status == 128 + signal.SIGTERM
    first_chief = _lines(chief, "start")[0]
    assert len(_lines(chief, "start")) == 2 and len(_lines(worker, "start")) == 2
    assert first_chief not in _lines(chief, "term")  # SIGKILLed with its gang, not stopped
    assert not _alive(first_chief)
    assert len(_lines(actor, "start")) == 1  # not in the gang: it went on
    assert caplog.text.count("restarting all 2 learner workers together from the chief's "
                             "checkpoint (restart 1 in") == 1
    assert "launch: learner 1 exited with signal SIGKILL; restarting all" in caplog.text
    assert "launch: learner exited" not in caplog.text  # its kill is the gang's, no 2nd line


def test_a_bad_setting_exit_status_2_is_not_restarted(tmp_path, caplog):
    ledger = tmp_path / "ledger"
    status = Supervisor([_spec("learner", ledger, "exit", "2", primary=True)],
                        QUICK).run(lambda: None)
    assert status == 2
    assert len(_lines(ledger, "start")) == 1
    assert "launch: learner exited with status 2 (a bad setting" in caplog.text


def test_a_killed_primary_is_restarted_and_named_with_its_signal(tmp_path, caplog):
    ledger = tmp_path / "ledger"
    killed = []

    def kill_the_first_start():
        starts = _lines(ledger, "start")
        if len(starts) == 1 and not killed:
            os.kill(starts[0], signal.SIGKILL)
            killed.append(starts[0])
        return len(starts) >= 2

    status = Supervisor([_spec("learner", ledger, "serve", primary=True)],
                        QUICK).run(_stop_after(kill_the_first_start))
    assert status == 128 + signal.SIGTERM
    assert "launch: learner exited with signal SIGKILL; restart 1 in" in caplog.text
    assert _lines(ledger, "term") == _lines(ledger, "start")[1:]  # the restart stopped cleanly


def test_a_stop_reaches_grandchildren_and_kills_what_ignores_sigterm_within_the_grace(
        tmp_path):
    ledger, stubborn = tmp_path / "ledger", tmp_path / "stubborn"
    supervisor = Supervisor([_spec("learner", ledger, "parent", primary=True),
                             _spec("actor 0", stubborn, "stubborn")], QUICK,
                            stop_grace_secs=1.0)
    # The grandchild noted its own start: its SIGTERM handler is in place (a SIGTERM
    # before that would end it without its "term" line).
    ready = lambda: (set(_lines(ledger, "child")) & set(_lines(ledger, "start"))
                     and _lines(stubborn, "start"))
    started = time.monotonic()
    status = supervisor.run(_stop_after(ready))
    stop_seconds = time.monotonic() - started
    assert status == 128 + signal.SIGTERM
    assert _lines(ledger, "term") == _lines(ledger, "child")  # its session got SIGTERM
    pids = _lines(ledger, "start") + _lines(ledger, "child") + _lines(stubborn, "start")
    assert not [pid for pid in pids if _alive(pid)]
    assert stop_seconds < 30  # bounded: the stubborn child was SIGKILLed after 1 s


SUPERVISOR_PROCESS = textwrap.dedent("""
    import sys
    from alf_async.supervision import reaper
    from alf_async.supervision.supervisor import ChildSpec, RestartPolicy, Supervisor
    reaper.ORPHAN_GRACE_SECS = 1.0  # the stubborn actor: SIGKILL a second after SIGTERM
    fake, ledger = sys.argv[1], sys.argv[2]
    specs = [ChildSpec("learner", [sys.executable, fake, ledger, "serve"], primary=True),
             ChildSpec("actor 0", [sys.executable, fake, ledger + ".actor", "stubborn"])]
    Supervisor(specs, RestartPolicy()).run(lambda: None)
""")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_by_signal_returns_128_plus_it_not_the_learners_own_143(tmp_path, signum):
    """The learner exits 143 on the SIGTERM the stop sends it, as `train` does; Ctrl-C
    on the launch still exits 130."""
    ledger = tmp_path / "l"
    supervisor = Supervisor([_spec("learner", ledger, "serve", str(128 + signal.SIGTERM),
                                   primary=True)], QUICK)
    status = supervisor.run(lambda: signum if _lines(ledger, "start") else None)
    assert _lines(ledger, "term"), "the learner was not stopped with SIGTERM"
    assert status == 128 + signum


def test_sigkill_of_the_supervisor_leaves_no_process_behind(tmp_path):
    ledger = str(tmp_path / "ledger")
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR_PROCESS, FAKE, ledger])
    pids = []
    try:
        _wait_for(lambda: _lines(ledger, "start") and _lines(ledger + ".actor", "start"))
        pids = _lines(ledger, "start") + _lines(ledger + ".actor", "start")
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(timeout=10)
        _wait_for(lambda: _lines(ledger, "term"), timeout=10)  # SIGTERM first: it may save
        _wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=10)
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(timeout=10)


def test_backoff_doubles_up_to_its_cap_and_the_budget_counts_a_window():
    from alf_async.supervision.supervisor import Child
    child = Child(ChildSpec("x", ["true"]), RestartPolicy(
        max_restarts=3, window_secs=10.0, backoff_secs=1.0, max_backoff_secs=3.0,
        healthy_secs=60.0))
    assert [child.schedule_restart(now) for now in (0.0, 1.0, 2.0)] == [1.0, 2.0, 3.0]
    assert child.schedule_restart(3.0) is None  # a 4th within 10 s
    assert child.schedule_restart(10.5) == 3.0  # the first fell out of the window
    child._started = 100.0  # pylint: disable=protected-access  # then a run of 60 s:
    assert child.schedule_restart(160.0) == 0.0  # healthy: at once, and the backoff anew
    child._started = 160.0  # pylint: disable=protected-access  # restarted, died in 1 s:
    assert child.schedule_restart(161.0) == 1.0


@pytest.mark.parametrize("returncode", [-signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT])
def test_a_child_stopped_from_outside_restarts_at_once_however_short_it_ran(returncode):
    """Pre-emption is no crash loop: a quick SIGKILL or SIGTERM gets no backoff (a quick
    failure of its own, an exit status or a crash signal, still does), and counts."""
    from alf_async.supervision.supervisor import Child
    child = Child(ChildSpec("x", ["true"]), RestartPolicy(
        max_restarts=3, window_secs=10.0, backoff_secs=1.0, max_backoff_secs=3.0,
        healthy_secs=60.0))
    assert child.schedule_restart(0.0, returncode) == 0.0
    assert child.schedule_restart(0.5, returncode) == 0.0
    assert child.schedule_restart(1.0, -signal.SIGSEGV) == 1.0
    assert child.schedule_restart(2.0, returncode) is None  # a 4th within 10 s


def test_a_child_that_exits_on_a_signal_it_handled_restarts_at_once_too():
    """`train` checkpoints on SIGTERM, then exits 143 (128 + 15): no backoff either."""
    from alf_async.supervision.supervisor import Child
    child = Child(ChildSpec("x", ["true"]), RestartPolicy(
        max_restarts=3, window_secs=10.0, backoff_secs=1.0, healthy_secs=60.0))
    assert child.schedule_restart(0.0, 128 + signal.SIGTERM) == 0.0
    assert child.schedule_restart(0.5, 1) == 1.0


@pytest.mark.parametrize("returncode, text", [(1, "exit status 1"), (-9, "signal SIGKILL"),
                                              (-15, "signal SIGTERM")])
def test_describe_status(returncode, text):
    assert describe_status(returncode) == text


@pytest.mark.parametrize("settings, line", [
    (dict(max_restarts=-1), "--max_restarts must be >= 0, got -1"),
    (dict(window_secs=0), "--restart_window_secs must be > 0, got 0")])
def test_bad_restart_settings_name_the_flag(settings, line):
    with pytest.raises(ValueError, match=line):
        RestartPolicy(**settings)


@pytest.mark.slow
def test_a_restart_promotes_the_warm_spare_and_a_stop_ends_every_spare(
        tmp_path, caplog, monkeypatch):
    caplog.set_level("INFO", logger="absl")
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(FAKE))  # the spares import fake_child
    ledger = tmp_path / "ledger"
    spare_argv = [sys.executable, "-m", "alf_async.supervision.spare", "fake_child", str(ledger), "serve"]
    supervisor = Supervisor([ChildSpec("learner", [sys.executable, FAKE, str(ledger), "serve"],
                                       primary=True, spare_argv=spare_argv)],
                            RestartPolicy(max_restarts=2, window_secs=60.0, backoff_secs=0.05,
                                          healthy_secs=0.0))  # every run healthy: at once
    waiting = supervisor.backend.spares.waiting
    spares, killed = [], []

    def kill_the_first_start_once_a_spare_waits():
        starts = _lines(ledger, "start")
        if waiting.get("learner") and waiting["learner"][0].pid not in spares:
            spares.append(waiting["learner"][0].pid)
        if len(starts) == 1 and len(spares) == 1 and not killed:
            os.kill(starts[0], signal.SIGKILL)
            killed.append(starts[0])
        return len(starts) == 2 and len(spares) == 2  # promoted, and a new spare made

    status = supervisor.run(_stop_after(kill_the_first_start_once_a_spare_waits))
    assert status == 128 + signal.SIGTERM
    assert _lines(ledger, "start")[1] == spares[0]  # the restart is the promoted spare
    assert "launch: learner exited with signal SIGKILL; restart 1 in 0.0 s" in caplog.text
    assert f"launch: learner starts from its warm spare (pid {spares[0]})" in caplog.text
    assert _lines(ledger, "term") == [spares[0]]  # the promoted spare stopped cleanly
    assert not [pid for pid in _lines(ledger, "start") + spares if _alive(pid)]


def test_a_stop_ends_as_soon_as_every_child_exited_not_after_the_whole_grace(tmp_path):
    """The grace is an upper bound: children that exit at once on SIGTERM end the stop
    at once (the stop used to read exits it never polled for, and always waited 4 s)."""
    ledgers = [tmp_path / "learner", tmp_path / "actor"]
    supervisor = Supervisor([_spec("learner", ledgers[0], "serve", primary=True),
                             _spec("actor 0", ledgers[1], "serve")], QUICK,
                            stop_grace_secs=4.0)
    stopped_at = []

    def stop_once_both_run():
        if all(_lines(ledger, "start") for ledger in ledgers) and not stopped_at:
            stopped_at.append(time.monotonic())
        return signal.SIGTERM if stopped_at else None

    assert supervisor.run(stop_once_both_run) == 128 + signal.SIGTERM
    assert all(_lines(ledger, "term") for ledger in ledgers)  # both exited on the SIGTERM
    assert time.monotonic() - stopped_at[0] < 2.0
