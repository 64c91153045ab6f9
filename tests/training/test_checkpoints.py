import json

from alf_async.runs import layout
from alf_async.training import checkpoints


def test_result_json_is_strict_json_with_null_for_an_unknown_return(tmp_path):
    assert layout.read_result(str(tmp_path)) is None
    checkpoints.write_result(str(tmp_path), dict(iteration=3, average_return=float("nan"),
                                                 frames_per_sec=12.5))
    text = (tmp_path / layout.RESULT_FILE).read_text()
    assert "NaN" not in text
    strict = json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(
        ValueError(f"not JSON: {name}")))
    assert strict == dict(iteration=3, average_return=None, frames_per_sec=12.5)
    assert layout.read_result(str(tmp_path)) == strict
