"""`alf_async.population.controller`: the loop, with members as deterministic fakes.

A fake member's run does what a real one does to its files: it restores its latest
checkpoint (its digest: the checkpoint's content), reports what it trains with in a
`trains_with` event, trains to the interval's budget, writes a checkpoint, a
`weights_saved` event and `result.json`. Its score is a function of its learning
rate, so the controller's choices are known.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from alf_async import events
from alf_async.experiments import report
from alf_async.population import controller, lineage, members as members_lib
from alf_async.population.mutations import parse_mutations
from records_fakes import write_records

K = 1000
MUTATIONS = parse_mutations(["alf_async.Learner.learning_rate:log_uniform(1e-4,1e-2)",
                             "PPOAlgorithm.clip_ratio:uniform(0.1,0.3)"])


def _fake_run(root, command, stale_settings=None, stale_weights=False, restarted=False):
    """One member's interval: restore, report, train, save, result."""
    params = dict(re.fullmatch(r"--gin_param=([^=]+)=(.*)", arg).groups()
                  for arg in command if arg.startswith("--gin_param="))
    budget = int(params["train.num_env_steps"])
    settings = {"learning_rate": float(params["alf_async.Learner.learning_rate"]),
                "clip_ratio": float(params["PPOAlgorithm.clip_ratio"])}
    folder = os.path.join(root, "checkpoints")
    os.makedirs(folder, exist_ok=True)
    saved = sorted(int(n[5:-6]) for n in os.listdir(folder) if n.endswith(".index"))
    restored = (open(os.path.join(folder, f"ckpt-{saved[-1]}.index")).read() if saved
                else f"init-{root}")
    log = events.EventLog(root, "learner")
    live = dict(settings, **(stale_settings or {}))
    log.emit("trains_with", iteration=budget // K - 1, env_steps=budget - K, settings=live,
             weights="stale" if stale_weights and saved else restored)
    if restarted:  # stopped mid-interval and started again: its own newer checkpoint
        log.emit("trains_with", iteration=budget // K - 1, env_steps=budget - K // 2,
                 settings=live, weights=f"{restored}-halfway")
    weights = f"{restored}>{settings['learning_rate']:.6g}"
    with open(os.path.join(folder, f"ckpt-{budget // K}.index"), "w") as out:
        out.write(weights)
    log.emit("weights_saved", iteration=budget // K, env_steps=budget, weights=weights)
    write_records(root, num_env_steps=budget)
    score = 100.0 - abs(settings["learning_rate"] - 3e-3) * 1e4  # best near 3e-3
    with open(os.path.join(root, "result.json"), "w") as out:
        json.dump(dict(average_return=score, env_steps=budget, iteration=budget // K), out)


def _fake_members(monkeypatch, **fault):
    def train_interval(todo, commands, parallel, should_stop, placement=None):
        for member in todo:
            os.makedirs(member.root_dir, exist_ok=True)
            _fake_run(member.root_dir, commands[member.index], **fault)
        return {member.index: 0 for member in todo}
    monkeypatch.setattr(members_lib, "train_interval", train_interval)


def _settings(tmp_path, **kwargs):
    return controller.PbtSettings(str(tmp_path), ["gin_configs/ppo_async.gin"], [], MUTATIONS,
                                  **dict(dict(population=4, interval_env_steps=K,
                                              generations=3, seed=5), **kwargs))


def test_the_bottom_continues_the_tops_checkpoint_with_explored_settings(tmp_path,
                                                                         monkeypatch):
    _fake_members(monkeypatch)
    events.configure(str(tmp_path), "pbt")
    try:
        assert controller.run(_settings(tmp_path)) == 0
    finally:
        events.configure(None, "pbt")
    records = lineage.read(str(tmp_path))
    assert len(records) == 4 * 3
    exploited = [r for r in records if r["parent"] != r["member"]]
    assert len(exploited) == 2  # one per generation after the first (a quarter of 4)
    by_key = {(r["member"], r["generation"]): r for r in records}
    for record in exploited:
        parent = by_key[(record["parent"], record["generation"] - 1)]
        for setting, value in record["settings"].items():  # x0.8, x1.2, or a new draw
            ratio = value / parent["settings"][setting]
            mutation = next(m for m in MUTATIONS if m.setting == setting)
            assert (min(abs(ratio - 0.8), abs(ratio - 1.2)) < 1e-9
                    or value in (mutation.low, mutation.high)
                    or mutation.low <= value <= mutation.high)
        # the member's weights at the end descend from the parent's checkpoint
        assert record["weights"].startswith(parent["weights"] + ">")
    assert lineage.ancestry(records, 0)[-1]["generation"] == 3
    ready = [e for e in events.read_events(str(tmp_path)) if e["event"] == "member_ready"]
    assert len(ready) == 12


def test_explore_perturbs_by_the_factors_it_is_given(tmp_path, monkeypatch):
    _fake_members(monkeypatch)
    settings = _settings(tmp_path, generations=2, factors=(1.5,), resample_probability=0.0)
    assert controller.run(settings) == 0
    records = lineage.read(str(tmp_path))
    [copied] = [r for r in records if r["parent"] != r["member"]]
    parent = next(r for r in records if (r["member"], r["generation"]) == (copied["parent"], 1))
    for mutation in MUTATIONS:
        asked = min(parent["settings"][mutation.setting] * 1.5, mutation.high)
        assert copied["settings"][mutation.setting] == pytest.approx(asked, rel=1e-9)


def test_a_restore_that_overwrites_the_new_learning_rate_stops_the_population(
        tmp_path, monkeypatch):
    """ray#62173's bug, as a member would show it: it trains with the checkpoint's
    learning rate, not the one it was given."""
    _fake_members(monkeypatch, stale_settings={"learning_rate": 0.5})
    with pytest.raises(controller.MutationNotApplied,
                       match=r"member 0: learning_rate asked 0\.\d+, live 0\.5"):
        controller.run(_settings(tmp_path))


def test_a_member_that_restored_other_weights_stops_the_population(tmp_path, monkeypatch):
    """ray#53831's class: an exploit whose restore went wrong, caught at the member's
    next start (generation 2), not by a collapsing return."""
    _fake_members(monkeypatch, stale_weights=True)
    with pytest.raises(controller.MutationNotApplied,
                       match=r"member \d: restored weights stale are not member \d's"):
        controller.run(_settings(tmp_path))
    assert {r["generation"] for r in lineage.read(str(tmp_path))} == {1}


def test_without_exploit_it_is_a_random_search_and_a_stopped_one_resumes(tmp_path,
                                                                         monkeypatch):
    _fake_members(monkeypatch)
    calls = []  # a signal comes as the second generation starts: nothing of it runs
    monkeypatch.setattr(members_lib, "train_interval", _stopping(members_lib.train_interval,
                                                                 calls))
    settings = _settings(tmp_path, exploit=False)
    assert controller.run(settings, lambda: len(calls) > 1) == 130
    assert {r["generation"] for r in lineage.read(str(tmp_path))} == {1}
    _fake_members(monkeypatch)
    said = []
    monkeypatch.setattr(controller.logging, "info", lambda fmt, *a: said.append(fmt % a))
    assert controller.run(settings) == 0  # the same command goes on
    assert said[0] == "pbt: resuming at generation 2 of 3"
    records = lineage.read(str(tmp_path))
    assert len(records) == 12 and all(r["parent"] == r["member"] for r in records)
    first = {r["member"]: r["settings"] for r in records if r["generation"] == 1}
    assert all(r["settings"] == first[r["member"]] for r in records)  # never perturbed
    with pytest.raises(ValueError, match="made with other population"):
        controller.run(_settings(tmp_path, exploit=False, population=5))


def _stopping(train_interval, calls):
    def wrapped(todo, commands, parallel, should_stop, placement=None):
        calls.append(len(todo))
        return {} if should_stop() else train_interval(todo, commands, parallel, should_stop,
                                                       placement)
    return wrapped


def test_verify_names_a_setting_the_run_cannot_change():
    member = members_lib.Member(3, "/nowhere", {"discount": 0.9})
    with pytest.raises(controller.MutationNotApplied, match="member 3: its run cannot change "
                                                            "discount"):
        controller.verify(member, [dict(settings={"learning_rate": 1e-3}, weights="w")])
    with pytest.raises(controller.MutationNotApplied, match="reported no settings"):
        controller.verify(member, [])
    controller.verify(member, [dict(settings={"discount": 0.8999999761581421}, weights="w")])


def test_a_restart_within_an_interval_is_checked_too_against_its_first_restore():
    """A member started again mid-interval (its node lost, a Ctrl-C) restores its own
    newer checkpoint: its weights differ from the interval's start, its settings may not."""
    member = members_lib.Member(1, "/nowhere", {"discount": 0.9}, weights="start")
    first = dict(settings={"discount": 0.9}, weights="start")
    again = dict(settings={"discount": 0.9}, weights="mid-interval")
    controller.verify(member, [first, again])
    with pytest.raises(controller.MutationNotApplied, match="restored weights mid-interval"):
        controller.verify(member, [again])
    with pytest.raises(controller.MutationNotApplied, match="discount asked 0.9, live 0.99"):
        controller.verify(member, [first, dict(again, settings={"discount": 0.99})])


def test_members_started_again_mid_interval_pass_the_check_of_their_first_restore(
        tmp_path, monkeypatch):
    _fake_members(monkeypatch, restarted=True)
    assert controller.run(_settings(tmp_path)) == 0
    assert len(lineage.read(str(tmp_path))) == 4 * 3


def test_the_population_is_one_run_for_the_report_its_best_member_per_ready_point(
        tmp_path, monkeypatch):
    from alf_async.runs.curves import load_curve
    _fake_members(monkeypatch)
    assert controller.run(_settings(tmp_path)) == 0
    records = lineage.read(str(tmp_path))
    curve = load_curve(str(tmp_path))
    assert list(curve["env_steps"]) == [K, 2 * K, 3 * K]
    for generation, value in zip((1, 2, 3), curve["value"]):
        best = max(r["score"] for r in records if r["generation"] == generation)
        assert value == pytest.approx(best)
    result = json.load(open(tmp_path / "result.json"))
    last = [r for r in records if r["generation"] == 3]
    top = max(last, key=lambda r: r["score"])
    assert result["best_member"] == top["member"] and result["env_steps"] == 3 * K
    assert result["average_return"] == pytest.approx(top["score"])
    # The report's env and budget: the best member's (each member trained 3 K).
    assert report._env_and_budget(str(tmp_path)) == dict(env="CartPole-v1", budget=3 * K)
    os.remove(tmp_path / "run_settings.json")  # as a population finished before it was written
    assert controller.run(_settings(tmp_path)) == 0  # done: nothing added twice
    assert len(load_curve(str(tmp_path))["value"]) == 3
    assert report._env_and_budget(str(tmp_path)) == dict(env="CartPole-v1", budget=3 * K)


def test_the_pbt_command_imports_no_tensorflow_before_it_checks_its_input():
    """Bad input is refused in a moment: the controller's modules leave TensorFlow to
    the members' runs (and the population's curve, once it is written)."""
    code = ("import sys, alf_async.pbt, alf_async.population.controller; "
            "print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr[-2000:]
