"""`alf_async.runs.layout`: a root_dir's names, read in one place; a reader sees the old
version of a file or the new one, never a part."""

import ast
import json
import os

import pytest

from alf_async.runs import layout


def test_a_text_file_whose_write_fails_keeps_its_old_content(tmp_path, monkeypatch):
    path = str(tmp_path / "result.json")
    layout.write_text(path, "old")
    monkeypatch.setattr(os, "replace", lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        layout.write_text(path, "new")
    assert open(path).read() == "old"
    monkeypatch.undo()
    layout.write_text(path, "new")
    assert open(path).read() == "new"


def _version(directory, text):
    os.makedirs(directory)
    with open(os.path.join(directory, "saved_model.pb"), "w") as f:
        f.write(text)


def _read(directory):
    with open(os.path.join(directory, "saved_model.pb")) as f:
        return f.read()


def test_a_stop_between_the_renames_leaves_the_previous_directory_readable(tmp_path,
                                                                           monkeypatch):
    path = str(tmp_path / "policy")
    _version(path, "v1")
    staged = layout.staged_directory(path)
    _version(staged, "v2")
    real_rename, renames = os.rename, []

    def rename_once(src, dst):
        if renames:
            raise KeyboardInterrupt  # the kill, after the old one moved aside
        renames.append(src)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename_once)
    with pytest.raises(KeyboardInterrupt):
        layout.replace_directory(staged, path)
    monkeypatch.undo()
    assert not os.path.exists(path)
    assert _read(layout.readable_directory(path)) == "v1"
    staged = layout.staged_directory(path)  # the dead writer's leftover is cleared
    assert not any(".partial-" in name and name != os.path.basename(staged)
                   for name in os.listdir(tmp_path))
    _version(staged, "v3")
    layout.replace_directory(staged, path)
    assert _read(layout.readable_directory(path)) == "v3"
    assert sorted(os.listdir(tmp_path)) == ["policy"]


def test_no_directory_is_none_and_a_saved_model_needs_its_variables_index(tmp_path):
    path = str(tmp_path / "policy")
    assert layout.readable_directory(path) is None
    _version(path, "v1")
    assert not layout.complete_saved_model(path)  # an empty variables/ as a kill left it
    os.makedirs(os.path.join(path, "variables"))
    open(os.path.join(path, "variables", "variables.index"), "w").close()
    assert layout.complete_saved_model(path)


def test_checkpoints_are_read_from_their_index_files_newest_first(tmp_path):
    directory = tmp_path / layout.CHECKPOINT_DIR
    directory.mkdir()
    for name in ("ckpt-8.index", "ckpt-12.index", "ckpt-12.data-00000-of-00001",
                 "ckpt-x.index", "checkpoint", "other-3.index"):
        (directory / name).write_text("")
    (directory / "ckpt-20.index").mkdir()  # not a file: not a checkpoint
    assert layout.checkpoints_in(str(directory)) == [(12, str(directory / "ckpt-12")),
                                                     (8, str(directory / "ckpt-8"))]
    assert layout.latest_checkpoint(str(tmp_path)) == (12, str(directory / "ckpt-12"))
    assert layout.latest_checkpoint(str(tmp_path / "nothing")) is None
    assert layout.checkpoint_number(layout.checkpoint_name(7) + ".index") == 7


def test_a_result_is_read_back_as_written_and_none_before_the_run_ends(tmp_path):
    assert layout.read_result(str(tmp_path)) is None
    layout.write_text(str(tmp_path / layout.RESULT_FILE), json.dumps({"iteration": 3}))
    assert layout.read_result(str(tmp_path)) == {"iteration": 3}


def _code_strings(path: str) -> set:
    """The string constants of a module's code, its docstrings left out."""
    with open(path) as f:
        tree = ast.parse(f.read())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    strings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            strings.add(node.value)
        elif isinstance(node, ast.JoinedStr):
            strings.update(part.value for part in node.values if isinstance(part, ast.Constant))
    return strings


def test_the_result_file_and_the_checkpoints_names_are_spelled_in_layout_alone():
    package = os.path.dirname(os.path.dirname(layout.__file__))
    spelled = {"result.json": set(), "ckpt-": set()}
    for folder, _, names in os.walk(package):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                for text in _code_strings(path):
                    for word, where in spelled.items():
                        if word in text:
                            where.add(os.path.relpath(path, package))
    assert spelled == {"result.json": {"runs/layout.py"}, "ckpt-": {"runs/layout.py"}}
