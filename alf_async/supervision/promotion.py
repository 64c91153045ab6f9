"""Whether this process is a warm spare still waiting for its promotion, and the wait.

A warm spare (`alf_async.supervision.spare`) imports a command and may run it
ahead; the command calls `await_promotion()` before it first acts on the world
(a port, the state it resumes from, a file it writes). The spare installs its
gate here; in any other process there is none and both calls return at once.

Thread-safety: `install` runs once, before the command starts; `pending` and
`await_promotion` may be called from any thread.
"""

import threading
from typing import Callable, Optional

from alf_async import events

_gate: Optional[threading.Event] = None
_on_promotion: Optional[Callable[[], None]] = None  # run once, by the first wait after it
_on_ready: Optional[Callable[[], None]] = None  # run once, by the first wait before it


def install(gate: threading.Event, on_promotion: Callable[[], None],
            on_ready: Optional[Callable[[], None]] = None) -> None:
    """Makes this process a spare: `gate` is set by the promotion, after which the
    first `await_promotion()` calls `on_promotion()` (priority, process name);
    `on_ready()` is called by the first `await_promotion()` that has to wait
    (the spare is ready: it says so where its supervisor can see it)."""
    global _gate, _on_promotion, _on_ready
    _gate, _on_promotion, _on_ready = gate, on_promotion, on_ready


def pending() -> bool:
    """Whether this process is a spare that has not been promoted yet."""
    return _gate is not None and not _gate.is_set()


def await_promotion() -> None:
    """In a spare, blocks until it is promoted, then runs `on_promotion` (once, however
    often it is called); elsewhere returns at once. A spare promoted before it
    was ready calls it when it gets there: its name and events start then."""
    global _on_promotion, _on_ready  # pylint: disable=global-statement
    if _gate is None:
        return
    ready, _on_ready = _on_ready, None
    if ready is not None and not _gate.is_set():
        ready()
    _gate.wait()
    become, _on_promotion = _on_promotion, None
    if become is not None:
        become()
    events.announce()  # a spare's run events start here
