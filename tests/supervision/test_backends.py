"""`alf_async.supervision.backends`: the registry the launch makes its backend from."""

import json
import os
import subprocess
import sys

import pytest

from alf_async.supervision import backends
from alf_async.supervision.local import LocalBackend

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)


def test_an_unknown_or_incomplete_backend_is_refused_naming_it(monkeypatch):
    with pytest.raises(ValueError, match=r"--backend must be one of local, ray, got 'k8s'"):
        backends.make_backend("k8s", backends.LaunchSettings())
    monkeypatch.setitem(backends.BACKENDS, "half", backends.BackendKind(
        launch=lambda settings: object(), placement=lambda settings: object()))
    with pytest.raises(TypeError, match=r"backend 'half' lacks name, start, tend, "
                                        r"drop_spares, close, place_learner"):
        backends.make_backend("half", backends.LaunchSettings())
    with pytest.raises(TypeError, match=r"backend 'half' lacks name, nodes, retries, "
                                        r"capacity, tf_threads, start, forget, close of "
                                        r"placement.Placement"):
        backends.make_placement("half", backends.PlacementSettings())
    with pytest.raises(ValueError, match=r"--backend must be one of half, local, ray, got 'k8s'"):
        backends.make_placement("k8s", backends.PlacementSettings())


def test_the_many_runs_commands_choose_their_placement_from_the_launchs_registry():
    """One backend list: `experiment`, `tune` and `pbt` offer what the launch offers."""
    code = ("import sys; from absl import flags; from alf_async.supervision import backends; "
            "backends.BACKENDS['third'] = backends.BACKENDS['local']; "
            "backends.define_placement_flags('seed'); flags.FLAGS(sys.argv); "
            "made = backends.placement_from_flags('seed', '/tmp', 'experiment'); "
            "print(type(made).__name__, made.retries, made.capacity(0))")
    result = subprocess.run([sys.executable, "-c", code, "--backend=third", "--seed_retries=4"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["LocalPlacement", "4", "1"]
    refused = subprocess.run([sys.executable, "-c", code, "--backend=k8s"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert refused.returncode != 0
    assert "value should be one of <local|ray|third>" in refused.stderr


def test_the_local_backend_places_learner_workers_on_loopback_at_distinct_ports():
    backend = backends.make_backend("local", backends.LaunchSettings(learner_workers=3))
    assert isinstance(backend, LocalBackend)
    placed = [backend.place_learner(f"learner {i}", "/tmp", port) for i, port in
              enumerate([0, 0, 0])]
    assert {host for host, _, _ in placed} == {"127.0.0.1"}
    ports = [port for _, *pair in placed for port in pair]
    assert len(set(ports)) == 6  # Reverb and all-reduce ports, none twice
    first = LocalBackend().place_learner("learner", "/tmp", 23456)
    assert first[1] == 23456 and first[2] != 23456  # --port kept for the first worker


_LAUNCH = """
import sys
sys.path[:0] = [{tests!r}, {here!r}]
import script_backend
script_backend.register({ledger!r})
from alf_async import config, launch
config.run_command(launch.main)
"""


def test_a_new_backend_is_one_module_and_one_entry(tmp_path):
    """The launch runs on a backend it has never heard of (`script_backend`), given only
    its registry entry: placement, the actors' servers, starts and the close all go
    through the `Backend` interface."""
    ledger, root = tmp_path / "ledger", tmp_path / "run"
    code = _LAUNCH.format(tests=TESTS, here=os.path.join(TESTS, "supervision"),
                          ledger=str(ledger))
    result = subprocess.run(
        [sys.executable, "-c", code, f"--root_dir={root}", "--backend=script", "--actors=2",
         "--learner_workers=2", "--nowarm_spares", "--gin_file=gin_configs/ppo_remote.gin"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    calls = [json.loads(line) for line in ledger.read_text().splitlines()]
    placed = [(c["name"], c["port"], tuple(c["where"])) for c in calls
              if c["call"] == "place_learner"]
    assert placed == [("learner", 0, ("127.0.0.2", 7001, 8001)),
                      ("learner 1", 0, ("127.0.0.3", 7002, 8002))]
    started = {c["name"]: " ".join(c["argv"]) for c in calls if c["call"] == "start"}
    assert set(started) == {"learner", "learner 1", "actor 0", "actor 1"}
    assert "--serve_port=7001" in started["learner"]
    assert "--server=127.0.0.2:7001" in started["actor 0"]  # task i: worker i mod N
    assert "--server=127.0.0.3:7002" in started["actor 1"]
    assert calls[-1] == {"call": "close"}
    assert "launch (script)" in result.stderr  # the start-up line names it
