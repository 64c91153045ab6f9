"""The guides: a strict MkDocs build, and result tables that match their data."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from alf_async.experiments import docs_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_strict_site_build(tmp_path):
    pytest.importorskip("mkdocs")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                             "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "AsyncOffPolicyDriver" in api and "get_training_exps" in api


def test_result_tables_are_generated_from_the_committed_summaries():
    stale = docs_tables.check(ROOT)
    assert not stale, (f"{stale} differ from docs/results/*.json: run "
                       f"`python -m alf_async.experiment docs`")


def test_a_changed_summary_makes_the_tables_stale(tmp_path):
    for name in ("README.md", "docs"):
        copy = shutil.copytree if name == "docs" else shutil.copy
        copy(os.path.join(ROOT, name), tmp_path / name)
    assert docs_tables.check(str(tmp_path)) == []
    path = tmp_path / "docs" / "results" / "ppo_async.json"
    text, changed = re.subn(r'"env_steps_to_target": \d+', '"env_steps_to_target": 9000',
                            path.read_text())
    assert changed
    path.write_text(text)
    stale = sorted([str(tmp_path / "README.md"), str(tmp_path / "docs" / "results.md")])
    assert sorted(docs_tables.check(str(tmp_path))) == stale
    assert sorted(docs_tables.write(str(tmp_path))) == stale
    assert docs_tables.check(str(tmp_path)) == []
    assert "| 9.0k |" in (tmp_path / "README.md").read_text()
