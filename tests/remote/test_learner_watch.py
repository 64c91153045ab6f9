"""`LearnerWatch`: an actor whose learner went silent ends, whatever it is blocked in."""

import subprocess
import sys
import time

_BLOCKED = """
import sys, time
from alf_async.remote.learner_watch import LearnerWatch
watch = LearnerWatch("Actor task 0, learner at 127.0.0.1:1", server_timeout_secs=0.5,
                     connect_timeout_secs=60.0, grace_secs=0.5)
watch.contact()  # the learner answered once
watch.arm()
if sys.argv[1] == "disarmed":
    watch.disarm()  # the actor ended its wait: nothing to watch
    time.sleep(2.0)  # twice the silence that would end an armed watch
    sys.exit(0)
time.sleep(60)  # a call that waits without a bound
"""


def _run(mode):
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", _BLOCKED, mode], capture_output=True,
                            text=True, timeout=60)
    return result, time.monotonic() - start


def test_a_silent_learner_ends_a_blocked_actor_with_one_line_and_status_3():
    result, seconds = _run("blocked")
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines() == [
        "Actor task 0, learner at 127.0.0.1:1: no answer for 1 s (limit 0 s): exiting"]
    assert seconds < 30  # not the 60 s the call would have waited


def test_a_disarmed_watch_leaves_the_process_alone():
    result, _ = _run("disarmed")
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_before_any_answer_the_connect_timeout_is_the_limit():
    from alf_async.remote.learner_watch import LearnerWatch  # pylint: disable=import-outside-toplevel
    watch = LearnerWatch("x", server_timeout_secs=5.0, connect_timeout_secs=300.0)
    assert watch.limit() == 300.0 and watch.last_contact is None
    watch.contact()
    assert watch.limit() == 5.0 and watch.silence() < 1.0
