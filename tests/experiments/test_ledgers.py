"""`ledgers`: chaos ledgers in a report, and the table that compares a chaos cell
with its fault-free cell."""

import json

from alf_async.experiments import ledgers


def _ledger(wall, faults=None, restarts=None, hangs=0):
    return dict(faults=faults or {}, restarts=restarts or {}, env_restarts=3,
                wall_seconds=90.0 if wall is None else 2 * wall,
                seconds_lost=4.25, reached=None if wall is None else
                dict(wall_seconds=wall, env_steps=150_000), processes_left=0,
                unreadable_checkpoints=0, duplicated_unrolls=0, hangs=hangs,
                longest_stop_secs=1.5)


def _cell(name, walls, **kwargs):
    return dict(name=name, seeds=[dict(seed=i, ledger=_ledger(w, **kwargs))
                                  for i, w in enumerate(walls)])


def test_the_table_has_every_seed_and_the_median_ratio_to_the_fault_free_cell():
    faults = dict(learner_kill=2, actor_kill=1, env_exception=5)
    table = ledgers.chaos_table(dict(cells=[
        _cell("faults=none", [20.0, 30.0, 25.0]),
        _cell("faults=all", [40.0, None, 35.0], faults=faults,
              restarts={"learner": 2, "actor 0": 1, "actor 1": 2})]))
    rows = [line for line in table.splitlines() if line.startswith("| faults=")]
    assert len(rows) == 6
    assert rows[3] == ("| faults=all | 0 | 80.0 | — | 40.0 (150,000) | 3; 5 | 2, 3; 3 | 4.2 | "
                       "0, 0, 0, 0 | 1.5 |")  # a ledger of before the CPU count: —
    assert "| faults=all | 1 | 90.0 | — | — |" in rows[4]
    assert ("Median wall seconds of the whole command: faults=none: 50.0 s; faults=all: "
            "80.0 s (1.60x faults=none).") in table
    assert table.endswith("Median wall seconds from the command to the target: faults=none: "
                          "25.0 s; faults=all: 37.5 s (1.50x faults=none).")


def test_the_cpu_seconds_are_a_column_and_their_medians_a_line_where_ledgers_count_them():
    cells = [_cell("faults=none", [20.0, 30.0]), _cell("faults=all", [40.0, 50.0])]
    for cell, cpu in zip(cells, [(100.0, 120.0), (200.0, 260.0)]):
        for seed, seconds in zip(cell["seeds"], cpu):
            seed["ledger"]["cpu_seconds"] = seconds
    table = ledgers.chaos_table(dict(cells=cells))
    assert "| faults=all | 1 | 100.0 | 260 | 50.0 (150,000) |" in table
    assert table.endswith("Median CPU seconds the machine's cores were busy: faults=none: "
                          "110.0 s; faults=all: 230.0 s (2.09x faults=none).")


def test_an_experiment_without_ledgers_has_no_table_and_a_run_without_one_reads_none(
        tmp_path):
    assert ledgers.chaos_table(dict(cells=[dict(name="ppo", seeds=[dict(seed=1)])])) == ""
    assert ledgers.read_ledger(str(tmp_path)) is None
    (tmp_path / "ledger.json").write_text(json.dumps(_ledger(12.5)))
    assert ledgers.wall_seconds_to_target(ledgers.read_ledger(str(tmp_path))) == 12.5


def test_a_ledger_with_a_schedule_shows_the_faults_fired_of_those_scheduled():
    ledger = _ledger(60.0, faults={"actor_kill": 2, "learner_kill": 3, "env_exception": 4})
    ledger["scheduled"] = {"actor_kill": 3, "learner_kill": 3}
    table = ledgers.chaos_table({"cells": [_cell("faults=all", [30.0])]})
    assert "| faults (outside, of scheduled; env exceptions) |" in table
    assert ledgers._faults(ledger) == "5 of 6; 4"  # pylint: disable=protected-access
    del ledger["scheduled"]  # a ledger written before the count: fired only
    assert ledgers._faults(ledger) == "5; 4"  # pylint: disable=protected-access
