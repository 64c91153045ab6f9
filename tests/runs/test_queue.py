"""The one run queue (`runs.queue`): P at a time, a lost run started again within its
budget, a stop that terms then kills; deterministic fakes, no process started."""

import signal
import time

from alf_async.runs import queue
from process_fakes import FakeProcess as _Process


class _Placement:
    """Hands out the processes planned for each name, in order; tracks what runs."""

    def __init__(self, plans):
        self.plans, self.started, self.forgotten, self.live, self.most = plans, [], 0, set(), 0

    def start(self, name, command, root_dir, relay=False):
        self.started.append((name, relay))
        process = self.plans[name].pop(0)
        self.live.add(id(process))
        self.most = max(self.most, len(self.live))
        return process

    def forget(self, process):
        self.forgotten += 1
        self.live.discard(id(process))


def _jobs(*names, relay=False):
    return [queue.Job(name, ["train", name], f"/runs/{name}", relay) for name in names]


def test_at_most_p_run_at_once_and_every_job_ends_with_its_own_status():
    placement = _Placement({"a": [_Process(0, polls=3)], "b": [_Process(1, polls=1)],
                            "c": [_Process(0, polls=2)]})
    ended = []
    runs = queue.RunQueue(placement, parallel=2, retries=0, grace_secs=1, poll_secs=0,
                          on_end=lambda job, process, started: ended.append(job.name))
    assert runs.run(_jobs("a", "b", "c"), should_stop=lambda: False) == dict(a=0, b=1, c=0)
    assert placement.most == 2 and placement.forgotten == 3
    assert [name for name, _ in placement.started] == ["a", "b", "c"]
    assert sorted(ended) == ["a", "b", "c"] and not runs.running


def test_a_lost_run_starts_again_first_within_its_budget_then_ends_lost():
    placement = _Placement({"a": [_Process(-9, lost="RayActorError")] * 3,
                            "b": [_Process(0, polls=5)]})
    retries, ended = [], {}
    runs = queue.RunQueue(placement, parallel=1, retries=2, grace_secs=1, poll_secs=0,
                          on_retry=lambda job, process, retry: retries.append((job.name, retry)),
                          on_end=lambda job, process, started: ended.update(
                              {job.name: process.lost}))
    assert runs.run(_jobs("a", "b"), should_stop=lambda: False) == dict(a=-9, b=0)
    assert retries == [("a", 1), ("a", 2)] and runs.retried("a") == 2
    assert [name for name, _ in placement.started] == ["a", "a", "a", "b"]  # retries first
    assert ended == dict(a="RayActorError", b=None)


def test_a_run_that_fails_itself_is_not_retried_unless_retry_when_says_so():
    plans = lambda: {"w": [_Process(-9), _Process(0)]}
    placement = _Placement(plans())
    plain = queue.RunQueue(placement, 1, retries=3, grace_secs=1, poll_secs=0)
    assert plain.run(_jobs("w"), lambda: False) == dict(w=-9) and len(placement.started) == 1
    placement = _Placement(plans())
    died = queue.RunQueue(placement, 1, retries=3, grace_secs=1, poll_secs=0,
                          retry_when=lambda process: process.returncode < 0)
    assert died.run(_jobs("w", relay=True), lambda: False) == dict(w=0)
    assert placement.started == [("w", True), ("w", True)]  # relay reaches the placement


def test_a_stop_terms_every_running_run_and_starts_no_more():
    running = [_Process(0, polls=10**6), _Process(0, polls=10**6)]
    placement = _Placement({"a": [running[0]], "b": [running[1]], "c": [_Process(0)]})
    rounds = []
    runs = queue.RunQueue(placement, parallel=2, retries=0, grace_secs=1, poll_secs=0)
    codes = runs.run(_jobs("a", "b", "c"), should_stop=lambda: len(rounds) >= 3,
                     tick=lambda: rounds.append(1))
    assert codes == {} and [job.name for job in runs.stopped] == ["a", "b"]
    assert [p.signals for p in running] == [[signal.SIGTERM], [signal.SIGTERM]]
    assert [name for name, _ in placement.started] == ["a", "b"] and not runs.running


def test_stop_runs_terms_each_then_kills_those_still_running_after_the_grace():
    polite, stubborn = _Process(polls=10**6), _Process(polls=10**6, ignores_term=True)
    started = time.time()
    queue.stop_runs([polite, stubborn], grace_secs=0.2)
    assert time.time() - started < 5
    assert polite.signals == [signal.SIGTERM] and polite.returncode == -signal.SIGTERM
    assert stubborn.signals == [signal.SIGTERM, signal.SIGKILL]
