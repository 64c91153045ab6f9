"""A population's member: its tracked run's group and name."""

from alf_async.population import members
from alf_async.tracking.settings import TrackerSettings


def test_a_member_is_one_tracked_run_in_its_populations_group():
    alone = TrackerSettings("mlflow")
    assert members.tracker_flags(alone, "/runs/pop1/", 3) == [
        "--tracker=mlflow", "--tracker_project=alf_async", "--tracker_group=pop1",
        "--tracker_name=pop1/member_3"]
    in_a_cell = TrackerSettings("wandb", group="exploit=true", name="exploit=true/seed_2")
    assert members.tracker_flags(in_a_cell, "/out/exploit=true/seed_2", 0)[-2:] == [
        "--tracker_group=exploit=true", "--tracker_name=exploit=true/seed_2/member_0"]
    assert members.tracker_flags(TrackerSettings(), "/runs/pop1", 0) == []  # none: no flags
