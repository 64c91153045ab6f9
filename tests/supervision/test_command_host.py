"""`CommandHost` (what a Ray actor of the Ray backend is), driven as a plain object:
the command it runs, the output it relays, its exit, a signal to the command's
session, a node that cannot write the root_dir. Every process is stopped by its PID."""

import os
import signal
import sys
import time

from alf_async.supervision.command_host import CommandHost

FAKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_child.py")


def _poll_until(host, condition, timeout=20.0):
    """Polls until `condition(state)`; returns every line seen and the last state."""
    deadline, lines = time.monotonic() + timeout, []
    while True:
        state = host.poll()
        lines += state["lines"]
        if condition(state):
            return lines, state
        assert time.monotonic() < deadline, f"timed out; lines: {lines}"
        time.sleep(0.05)


def test_it_runs_the_command_with_its_own_python_and_relays_its_output():
    host = CommandHost()
    code = "import sys; print('progress 1', flush=True); print('oops', file=sys.stderr); sys.exit(3)"
    where = host.start(["/no/such/python", "-c", code])  # argv[0]: the node's own Python
    lines, state = _poll_until(host, lambda s: s["returncode"] is not None)
    assert (state["incarnation"], state["started"], state["returncode"]) == (
        host.incarnation, True, 3)
    # Every line, stderr's too, each once, by the poll that saw the exit at the latest.
    assert sorted(lines) == ["oops\n", "progress 1\n"]
    assert host.poll()["lines"] == []
    assert where["incarnation"] == host.incarnation and where["command_pid"] > 0


def test_a_signal_reaches_the_commands_whole_session_and_a_log_path_takes_the_output(
        tmp_path):
    host, ledger = CommandHost(), tmp_path / "ledger"
    where = host.start([sys.executable, FAKE, str(ledger), "parent"], str(tmp_path / "a.log"))
    try:
        _poll_until(host, lambda s: ledger.exists() and "start" in ledger.read_text())
        grandchild = int(ledger.read_text().split("child ")[1].split()[0])
        host.signal(signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{grandchild}") and \
                open(f"/proc/{grandchild}/stat").read().split(")")[-1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the command's own child outlived it"
            time.sleep(0.05)
        assert host.poll()["lines"] == []  # its output went to the log, not the relay
    finally:
        for pid in [where["command_pid"]]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_fresh_host_has_a_new_incarnation_and_no_command():
    """What the launch sees after Ray restarted a host: another incarnation, nothing
    started (it restarts the command there)."""
    first, again = CommandHost(), CommandHost()
    assert first.incarnation != again.incarnation
    assert again.poll() == dict(incarnation=again.incarnation, started=False, returncode=None,
                                lines=[])
    assert again.wait(timeout=0.1) is None


def test_a_root_dir_the_node_cannot_write_is_one_line_naming_it(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        error = CommandHost().check_writable(str(locked / "run"))
    finally:
        locked.chmod(0o700)
    if os.geteuid() == 0:
        assert error is None  # root writes anywhere
    else:
        assert error.startswith(f"root_dir='{locked / 'run'}' is not writable on node 127.0.0.1")
    assert CommandHost().check_writable(str(tmp_path / "fine")) is None
    ports = CommandHost().free_ports(3)
    assert len(set(ports)) == 3 and all(0 < port < 65536 for port in ports)


def test_a_restart_on_the_host_promotes_the_spare_it_keeps_ready(tmp_path, monkeypatch):
    """The Ray backend's warm spare: the host starts it beside a running command and
    a restart there is its promotion (the imports done ahead), not a cold start."""
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(FAKE))  # the spare imports fake_child
    host, ledger = CommandHost(), tmp_path / "ledger"
    spare_argv = [sys.executable, "-m", "alf_async.supervision.spare", "fake_child",
                  str(ledger), "serve"]
    first = host.start([sys.executable, FAKE, str(ledger), "serve"], str(tmp_path / "a.log"),
                       spare_argv=spare_argv)
    pids = [first["command_pid"]]
    try:
        assert not first["promoted"]
        _poll_until(host, lambda s: host._spares.waiting.get("command"))  # pylint: disable=protected-access
        spare = host._spares.waiting["command"][0].pid  # pylint: disable=protected-access
        pids.append(spare)
        host.signal(signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
        again = host.start([sys.executable, FAKE, str(ledger), "serve"], str(tmp_path / "a.log"),
                           spare_argv=spare_argv)
        assert again["promoted"] and again["command_pid"] == spare
        _poll_until(host, lambda s: ledger.exists() and str(spare) in ledger.read_text())
        _poll_until(host, lambda s: host._spares.waiting.get("command"))  # and a new spare waits
        pids.append(host._spares.waiting["command"][0].pid)  # pylint: disable=protected-access
        # A restart with other arguments (an actor dialling a learner that moved) does
        # not promote the spare made for the old ones: it starts cold, with the new.
        other = [*spare_argv[:-1], "exit"]
        cold = host.start([sys.executable, FAKE, str(ledger), "serve", "7"],
                          str(tmp_path / "a.log"), spare_argv=other)
        pids.append(cold["command_pid"])
        assert not cold["promoted"] and cold["command_pid"] != pids[-2]
        assert host._spares.waiting == {}  # pylint: disable=protected-access
        host.drop_spare()
        assert host._spares.waiting == {}  # pylint: disable=protected-access
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
