import dataclasses
import json

import pytest

from alf_async.experiments import cells


def test_seeds_as_range_list_or_both():
    assert cells.parse_seeds("1-5") == [1, 2, 3, 4, 5]
    assert cells.parse_seeds("1,3,7") == [1, 3, 7]
    assert cells.parse_seeds("1-3, 9") == [1, 2, 3, 9]


@pytest.mark.parametrize("bad", ["", "a", "5-1", "1-2-3", "-1", "1,1", "1-3,2"])
def test_bad_seeds_name_the_flag(bad):
    with pytest.raises(ValueError, match="--seeds"):
        cells.parse_seeds(bad)


def test_grid_values_stay_gin_text_with_nested_commas():
    name, values = cells.parse_grid(
        "PPOAlgorithm.actor_fc_layers=[(64, 64), (256, 256)]")
    assert name == "PPOAlgorithm.actor_fc_layers"
    assert values == ["(64, 64)", "(256, 256)"]
    assert cells.parse_grid("a.b=['x,y', 'z']")[1] == ["'x,y'", "'z'"]


@pytest.mark.parametrize("bad", ["a.b=1", "a.b", "=[1]", "a.b=[]"])
def test_bad_grid_is_rejected(bad):
    with pytest.raises(ValueError, match="--grid"):
        cells.parse_grid(bad)


def test_cells_are_the_product_of_the_grids(tmp_path):
    made = cells.make_cells(["configs/ppo.gin"], ["train.num_env_steps=100"],
                            ["alf_async.Learner.learning_rate=[1e-3, 3e-4]",
                             "alf_async.Learner.num_epochs=[2, 4, 8]"], target=475.0)
    assert len(made) == 6
    assert made[0].name == "learning_rate=1e-3,num_epochs=2"
    assert made[0].bindings == ("train.num_env_steps=100", "alf_async.Learner.learning_rate=1e-3",
                                "alf_async.Learner.num_epochs=2")
    assert len({c.name for c in made}) == 6
    made[5].save(str(tmp_path / made[5].name))
    assert cells.load_cell(str(tmp_path / made[5].name)) == made[5]
    assert json.loads((tmp_path / made[5].name / cells.CELL_FILE).read_text())["target"] == 475.0


def test_no_grid_is_one_cell_named_after_the_gin_file():
    made = cells.make_cells(["a/base.gin", "b/ppo_async.gin"], [], [])
    assert [c.name for c in made] == ["ppo_async"] and made[0].grid == ()


def test_gridding_a_binding_twice_is_an_error():
    with pytest.raises(ValueError, match="twice"):
        cells.make_cells(["x.gin"], [], ["a.b=[1, 2]", "a.b=[3]"])


def test_cell_names_that_collide_are_an_error():
    with pytest.raises(ValueError, match="same name"):
        cells.make_cells(["x.gin"], [], ["a.b=['p q', 'pq']"])


def test_a_chaos_grid_over_a_runner_flag_makes_a_fault_free_and_a_chaos_cell(tmp_path):
    made = cells.make_cells(["ppo_chaos.gin"], ["train.num_env_steps=9", "--rounds=3"],
                            ["--faults=[none, all]"], 475.0, runner="chaos")
    assert [c.name for c in made] == ["faults=none", "faults=all"]
    assert made[1].gin_bindings == ("train.num_env_steps=9",)
    assert made[1].runner_flags == ("--rounds=3", "--faults=all")
    made[1].save(str(tmp_path / "c"))
    assert cells.load_cell(str(tmp_path / "c")) == made[1]  # the runner too
    with pytest.raises(ValueError, match="--runner must be one of train, chaos, pbt, got 'x'"):
        cells.make_cells(["a.gin"], [], [], runner="x")


def test_a_saved_cell_runs_again_with_more_bindings_unless_its_gin_file_changed(tmp_path):
    gin = tmp_path / "c.gin"
    gin.write_text("a.b = 1\n")
    cell = cells.make_cells([str(gin)], ["x.y=2"], [], target=5.0)[0]
    dataclasses.replace(cell, name="trial_3").save(str(tmp_path / "trial_3"))
    again = cells.cell_again(str(tmp_path / "trial_3" / "cell.json"), ["train.seed=4"])
    assert again.name == "trial_3" and again.target == 5.0
    assert again.bindings == ("x.y=2", "train.seed=4") and again.gin_files == (str(gin),)
    gin.write_text("a.b = 2\n")
    with pytest.raises(ValueError, match=r"c.gin changed since the cell was made"):
        cells.cell_again(str(tmp_path / "trial_3"))
    with pytest.raises(ValueError, match="no cell.json there"):
        cells.cell_again(str(tmp_path))


def test_a_grid_of_paths_names_its_cells_by_their_last_components():
    made = cells.make_cells(["bc.gin"], [], [
        "DatasetBatches.dataset_dir=['runs/datasets/medium', "
        "['runs/datasets/random', 'runs/datasets/medium/']]"])
    assert [c.name for c in made] == ["dataset_dir=medium", "dataset_dir=random_medium"]
    assert made[1].bindings == (
        "DatasetBatches.dataset_dir=['runs/datasets/random', 'runs/datasets/medium/']",)
