"""`alf_async.population.lineage`: the records, a member's ancestry and its schedule."""

import pytest

from alf_async.population import lineage


def _record(member, generation, parent, lr, score=1.0):
    return dict(member=member, generation=generation, parent=parent,
                settings={"learning_rate": lr}, score=score, env_steps=generation * 100,
                weights=f"w{member}{generation}")


RECORDS = [_record(0, 1, 0, 1e-3), _record(1, 1, 1, 2e-3, 5.0),
           _record(0, 2, 1, 2.4e-3), _record(1, 2, 1, 2e-3, 6.0),
           _record(0, 3, 0, 2.4e-3), _record(1, 3, 0, 1.9e-3)]


def test_a_members_ancestry_follows_whose_checkpoint_it_continued(tmp_path):
    for record in RECORDS:
        lineage.append(str(tmp_path), record)
    with open(lineage.lineage_path(str(tmp_path)), "a") as torn:
        torn.write('{"member": 9, "gen')  # cut by a crash
    records = lineage.read(str(tmp_path))
    assert records == RECORDS
    chain = lineage.ancestry(records, 1)  # 1 at 3 continued 0 at 2, which continued 1 at 1
    assert [(r["member"], r["generation"]) for r in chain] == [(1, 1), (0, 2), (1, 3)]
    assert [r["settings"]["learning_rate"] for r in chain] == [2e-3, 2.4e-3, 1.9e-3]
    with pytest.raises(ValueError, match=r"member 7 is not in the lineage \(members: \[0, 1\]\)"):
        lineage.ancestry(records, 7)


def test_the_table_shows_each_generation_and_where_it_came_from():
    text = lineage.table(RECORDS)
    lines = text.splitlines()
    assert lines[0] == "| member | generation | parent | learning_rate | score | env steps |"
    assert "| 0 | 2 | 1 | 0.0024 | 1.0 | 200 |" in lines
    assert "| 1 | 2 | own | 0.002 | 6.0 | 200 |" in lines  # its own checkpoint
    assert len(lines) == 2 + len(RECORDS) + 2  # and the line that explains the columns
    assert lines[-1].startswith("parent: the member whose checkpoint this generation")


def test_a_replays_schedule_is_one_short_line_of_each_settings_values():
    chain = lineage.ancestry(RECORDS, 1)
    assert lineage.schedule_text(chain) == "learning_rate 0.002 -> 0.0024 -> 0.0019"


def test_a_folder_without_lineage_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no lineage"):
        lineage.write_report(str(tmp_path))
