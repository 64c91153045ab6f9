"""`docs_tables`: the README's configs table from published summaries."""

from alf_async.experiments import docs_tables


def _cell(name):
    return dict(name=name, env="CartPole-v1", target=475.0, budget=600_000, seeds=[
        dict(env_steps_to_target=150_000, seconds_to_target=15.0, last25_min=480.0)])


def test_a_results_file_of_several_cells_names_each_cells_row():
    one = dict(config="ppo_async.gin", source="alf_async.experiment",
               experiments=[dict(cells=[_cell("ppo_async")])])
    two = dict(config="ppo_chaos.gin", source="alf_async.experiment",
               experiments=[dict(cells=[_cell("faults=none"), _cell("faults=all")])])
    rows = docs_tables.configs_table([("ppo_async", one), ("ppo_chaos", two)]).splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| [`ppo_async.gin`](docs/results.md#ppo_async)",
        "| [`ppo_chaos.gin` (faults=none)](docs/results.md#ppo_chaos)",
        "| [`ppo_chaos.gin` (faults=all)](docs/results.md#ppo_chaos)"]
