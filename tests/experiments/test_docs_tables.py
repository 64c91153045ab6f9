"""`docs_tables`: the README's configs table from published summaries."""

import os
import shutil

import pytest

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
    catalog = [dict(result="dqn_items", task="CartPole-v1", reference="SB3 DQN: 500")]
    page = docs_tables.results_page([("dqn_items", dict(both, source="by hand"))], catalog)
    assert "\n    run A\n    run B\n" in page  # each experiment's command, as code
    assert page.index("#### max") < page.index("#### td_error")  # each one's tables headed


def test_cells_of_a_result_named_other_than_its_config_carry_its_name():
    """`ppo_chaos_ray` (ppo_chaos.gin's cells on the Ray backend) beside `ppo_chaos`."""
    cells = [dict(_cell("c"), name="faults=all"), dict(_cell("c"), name="faults=none")]
    ray = dict(config="ppo_chaos.gin", source="alf_async.experiment", command="run",
               experiments=[dict(name="chaos_ray_cert", cells=cells)])
    rows = docs_tables.configs_table([("ppo_chaos", ray), ("ppo_chaos_ray", ray)])
    assert [row.split(" | ")[0] for row in rows.splitlines()[2:]] == [
        "| [`ppo_chaos.gin` (faults=all)](docs/results.md#ppo_chaos)",
        "| [`ppo_chaos.gin` (faults=none)](docs/results.md#ppo_chaos)",
        "| [`ppo_chaos.gin` (ppo_chaos_ray, faults=all)](docs/results.md#ppo_chaos_ray)",
        "| [`ppo_chaos.gin` (ppo_chaos_ray, faults=none)](docs/results.md#ppo_chaos_ray)"]


def test_the_results_page_leads_with_the_shipped_configs_and_sends_the_rest_to_ablations():
    shipped = dict(config="ppo_async.gin", source="by hand",
                   experiments=[dict(cells=[_cell("ppo_async")])])
    ablation = dict(shipped, note="An A/B run, see [notes](experiments/ppo-minatar.md).")
    results = [("ppo_async", shipped), ("ppo_async_ab", ablation)]
    catalog = [dict(result="ppo_async", task="CartPole-v1", reference="SB3 PPO: 500 after 100k")]
    page = docs_tables.results_page(results, catalog)
    summary = page.split("## Summary", 1)[1].split("## CartPole-v1", 1)[0]
    assert ("| CartPole-v1 | [`ppo_async.gin`](#ppo_async) | 475 | 1/1 | 150.0k | 15.0 | "
            "SB3 PPO: 500 after 100k |") in summary
    assert "### ppo_async" in page and "ppo_async_ab" not in page
    ablations = docs_tables.ablations_page(results, catalog)
    assert "## ppo_async_ab" in ablations and "## ppo_async\n" not in ablations
    assert "(ppo-minatar.md)" in ablations  # its note's link, as seen from experiments/


def test_a_catalog_naming_a_missing_result_is_an_error(tmp_path):
    (tmp_path / "catalog.json").write_text('{"shipped": [{"result": "gone", "task": "x", '
                                           '"reference": "y"}]}')
    try:
        docs_tables.load_catalog(str(tmp_path))
    except ValueError as error:
        assert "['gone']" in str(error)
    else:
        raise AssertionError("a catalog naming a missing result was accepted")



def test_a_result_published_anew_gets_its_curves_drawn_again(tmp_path):
    results = tmp_path / "docs" / "results"
    results.mkdir(parents=True)
    (tmp_path / "README.md").write_text(f"{docs_tables.BEGIN}\n{docs_tables.END}\n")
    shutil.copy(os.path.join(ROOT, "docs", "results", "ppo_async.json"), results)
    (results / "catalog.json").write_text('{"shipped": [{"result": "ppo_async", "task": '
                                          '"CartPole-v1", "reference": "SB3"}]}')
    png = results / "ppo_async.png"
    png.write_bytes(b"stale curves of the previous result")
    docs_tables.write(str(tmp_path))
    assert png.read_bytes() == b"stale curves of the previous result"  # not asked: kept
    docs_tables.write(str(tmp_path), redraw=["ppo_async"])
    assert png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("config, result, task, catalog, cells, target, expected", [
    # Pooled, the two rows of ppo_chaos.gin (local and Ray) looked the same and each
    # median mixed 5 fault-free with 5 fault-injected seeds.
    ("ppo_chaos.gin", "ppo_chaos", "CartPole-v1",
     dict(where="Ray cluster", reference="the fault-free Ray runs beside it"),
     [("faults=all", 200_000, 5), ("faults=none", 100_000, 5)], 475.0,
     ["| CartPole-v1 | [`ppo_chaos.gin`](#ppo_chaos) (Ray cluster, fault-free) | 475 | 5/5 | "
      "100.0k | 10.0 | the baseline of the row below |",
      "| CartPole-v1 | [`ppo_chaos.gin`](#ppo_chaos) (Ray cluster, faults injected) | 475 | "
      "5/5 | 200.0k | 20.0 | the fault-free Ray runs beside it |"]),
    ("ppo_lunarlander.gin", "pbt_lunarlander", "LunarLander-v2",
     dict(reference="its random search above"),
     [("exploit=true", 240_000, 3), ("exploit=false", 400_000, 3)], 200.0,
     ["| LunarLander-v2 | [`ppo_lunarlander.gin`](#pbt_lunarlander) (random search) | 200 | "
      "3/3 | 400.0k | 40.0 | the baseline of the row below |",
      "| LunarLander-v2 | [`ppo_lunarlander.gin`](#pbt_lunarlander) (PBT) | 200 | 3/3 | "
      "240.0k | 24.0 | its random search above |"]),
])
def test_the_summary_gives_each_cell_of_a_comparison_a_row_of_its_own_baseline_first(
        config, result, task, catalog, cells, target, expected):
    """A chaos experiment's fault-free and faulted cells; PBT and its random search."""
    summary = dict(config=config, source="alf_async.experiment", experiments=[dict(cells=[
        dict(_cell(name), target=target, seeds=[dict(
            seed=s, env_steps_to_target=steps, seconds_to_target=steps / 10_000)
            for s in range(seeds)]) for name, steps, seeds in cells])])
    catalog = [dict(catalog, result=result, task=task)]
    assert docs_tables.summary_table([(result, summary)], catalog).splitlines()[2:] == expected
