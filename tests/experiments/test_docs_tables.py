"""`docs_tables`: the README's configs table from published summaries."""

import os
import shutil

from alf_async.experiments import docs_tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cell(name):
    return dict(name=name, env="CartPole-v1", target=475.0, budget=600_000, seeds=[
        dict(seed=1, env_steps_to_target=150_000, seconds_to_target=15.0, last25_min=480.0)])


def test_a_results_file_of_several_cells_names_each_cells_row():
    one = dict(config="ppo_async.gin", source="alf_async.experiment",
               experiments=[dict(cells=[_cell("ppo_async")])])
    two = dict(config="ppo_chaos.gin", source="alf_async.experiment",
               experiments=[dict(cells=[_cell("faults=none"), _cell("faults=all")])])
    variant = dict(one, experiments=[dict(cells=[_cell("ppo_async")])])
    rows = docs_tables.configs_table([("ppo_async", one), ("ppo_async_big", variant),
                                      ("ppo_chaos", two)]).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| [`ppo_async.gin`](docs/results.md#ppo_async)",
        "| [`ppo_async.gin` (ppo_async_big)](docs/results.md#ppo_async_big)",
        "| [`ppo_chaos.gin` (faults=none)](docs/results.md#ppo_chaos)",
        "| [`ppo_chaos.gin` (faults=all)](docs/results.md#ppo_chaos)"]


def test_a_results_file_of_several_experiments_names_each_rows_experiment():
    both = dict(config="dqn.gin", source="alf_async.experiment", command="run A\nrun B",
                experiments=[dict(name="max", cells=[_cell("dqn")]),
                             dict(name="td_error", cells=[_cell("dqn")])])
    rows = docs_tables.configs_table([("dqn_items", both)]).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| [`dqn.gin` (max)](docs/results.md#dqn_items)",
        "| [`dqn.gin` (td_error)](docs/results.md#dqn_items)"]
    page = docs_tables.results_page([("dqn_items", dict(both, source="by hand"))])
    assert "\n    run A\n    run B\n" in page  # each experiment's command, as code
    assert page.index("### max") < page.index("### td_error")  # each one's tables headed



def test_a_result_published_anew_gets_its_curves_drawn_again(tmp_path):
    results = tmp_path / "docs" / "results"
    results.mkdir(parents=True)
    (tmp_path / "README.md").write_text(f"{docs_tables.BEGIN}\n{docs_tables.END}\n")
    shutil.copy(os.path.join(ROOT, "docs", "results", "ppo_async.json"), results)
    png = results / "ppo_async.png"
    png.write_bytes(b"stale curves of the previous result")
    docs_tables.write(str(tmp_path))
    assert png.read_bytes() == b"stale curves of the previous result"  # not asked: kept
    docs_tables.write(str(tmp_path), redraw=["ppo_async"])
    assert png.read_bytes().startswith(b"\x89PNG")
