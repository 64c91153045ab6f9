"""A third launch backend, for the tests: one module and one entry in `BACKENDS`.

`ScriptBackend` places the learner's workers at made-up addresses and runs every
command as `tests/fake_child.py` on this host: the learner exits 0 at once (which
ends the launch), the actors serve until stopped. Each call the launch makes of
it is one JSON line in LEDGER.
"""

import json
import os
import sys

from alf_async.supervision import backends
from alf_async.supervision.local import LocalProcess, popen_in_session
from alf_async.supervision.placement import LocalPlacement

FAKE_CHILD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "fake_child.py")


class ScriptBackend:
    """A `backend.Backend` of fake children, writing down what it was asked."""

    name = "script"

    def __init__(self, ledger: str):
        self._ledger = ledger
        self._placed = 0

    def _note(self, **record) -> None:
        with open(self._ledger, "a") as out:
            out.write(json.dumps(record) + "\n")

    def place_learner(self, name, root_dir, port):
        self._placed += 1
        where = (f"127.0.0.{self._placed + 1}", port or 7000 + self._placed,
                 8000 + self._placed)
        self._note(call="place_learner", name=name, root_dir=root_dir, port=port,
                   where=list(where))
        return where

    def start(self, spec):
        self._note(call="start", name=spec.name, argv=list(spec.argv))
        mode = ["exit", "0"] if spec.primary else ["serve"]
        return LocalProcess(popen_in_session(
            [sys.executable, FAKE_CHILD, self._ledger + ".children", *mode], spec.log_path))

    def tend(self, spec, running):
        del spec, running  # no spares

    def drop_spares(self, wait):
        del wait

    def close(self):
        self._note(call="close")


def register(ledger: str) -> None:
    """`--backend=script` from here on, in this process."""
    backends.BACKENDS["script"] = backends.BackendKind(
        launch=lambda settings: ScriptBackend(ledger),
        placement=lambda settings: LocalPlacement(settings.retries))
