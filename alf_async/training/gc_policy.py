"""When a command's process runs Python's cyclic garbage collector.

TensorFlow, tf-agents and TF Probability create about a million long-lived
objects at import. Each full collection walks all of them (~0.25 s on a
2-core VM), and the imports themselves trigger several: collecting while
importing took ~0.8 s of a ~5 s start. The commands (`alf_async.train`,
`alf_async.actor`) therefore import with the collector off, then freeze what
the imports made (`gc.freeze()`: later collections skip it), and skip the
interpreter's last collection on the way out.

Library code never calls these: they are for a command's own process.
"""

import contextlib
import gc


@contextlib.contextmanager
def imports_uncollected():
    """Runs the block (a command's imports) with the cyclic collector off.

    On leaving it, every object alive is frozen into the permanent generation,
    which later collections skip, and the collector is on again if it was
    before. The imports make almost no cyclic garbage (~1 MB kept of ~420 MB).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def exits_fast():
    """Skips the interpreter's last garbage collection when the block exits.

    That collection walks TensorFlow's object graph for ~3 s on the way out
    (after everything was saved and closed); a stopped process must be gone
    within the 5 s its supervisor waits.
    """
    try:
        yield
    finally:
        gc.freeze()
