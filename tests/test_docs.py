"""The guides: a strict MkDocs build, and result tables that match their data."""

import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from alf_async.experiments import docs_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(name="site", scope="module")
def _site(tmp_path_factory):
    """`(the built site's folder, mkdocs' output)`: one strict build for the module."""
    pytest.importorskip("mkdocs")
    site = tmp_path_factory.mktemp("docs") / "site"
    # The console script, as the README runs it (`python -m mkdocs` hides the plugins'
    # import-time warnings).
    mkdocs = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    result = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return site, output


@pytest.mark.slow  # the whole site, as mkdocs builds it
def test_strict_site_build(site):
    site, output = site
    assert "Warning" not in output, output  # the pinned plugins agree with each other
    api = (site / "api" / "index.html").read_text()
    assert "AsyncOffPolicyDriver" in api and "get_training_exps" in api
    for name in ("training.loop", "training.checkpoints", "training.evaluation", "batches.replay_buffer",
                 "batches.prioritized", "remote.service"):
        assert f"alf_async.{name}" in api, name
    images = 0
    for page in ("results", "experiments/ablations"):
        text = (site / page / "index.html").read_text()
        for image in re.findall(r'<img [^>]*src="([^"]+)"', text):
            assert (site / page / image).is_file(), image
        images += text.count("<img ")
    summaries = len(docs_tables.load_results(os.path.join(ROOT, "docs", "results")))
    assert images == summaries  # every result's curves, on the Results page or the ablations'
    assert "the field" in (site / "results" / "index.html").read_text()


# Appended to a page: what a reader at 1280 px would see broken, as JSON in the body.
_LAYOUT_PROBE = """<script>
var broken = [];
document.querySelectorAll(".md-typeset code.whole").forEach(function (code) {
  if (code.getClientRects().length > 1) broken.push("split: " + code.textContent);
});
document.querySelectorAll(".md-typeset pre > code").forEach(function (code) {
  if (getComputedStyle(code).whiteSpace !== "pre") broken.push("wraps: " + code.textContent);
});
document.querySelectorAll(".md-typeset table").forEach(function (table) {
  if (table.scrollWidth > table.clientWidth + 1) {
    broken.push("cut: the table of " + table.rows[0].textContent.trim().slice(0, 40));
  }
});
document.body.setAttribute("data-broken", JSON.stringify(broken));
</script></body>"""


@pytest.mark.slow  # the site, and a real browser
@pytest.mark.parametrize("page", ["getting-started", "results", "experiments", "offline"])
def test_at_1280_px_no_short_code_splits_no_command_wraps_and_no_table_is_cut(site, page,
                                                                             tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium)")
    site, _ = site
    probed = site / page / "probed.html"
    probed.write_text((site / page / "index.html").read_text().replace("</body>",
                                                                       _LAYOUT_PROBE))
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
         f"--user-data-dir={tmp_path}", "--virtual-time-budget=5000", "--dump-dom",
         probed.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-broken="([^"]*)"', result.stdout)
    assert found, result.stderr[-2000:]
    broken = json.loads(html.unescape(found.group(1)))
    assert broken == []


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


def _nav_guides():
    """The guides in the site's navigation (mkdocs.yml), as docs/-relative paths."""
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        nav = f.read().split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    guides = re.findall(r"^  - [^:]+: ([\w-]+\.md)$", nav, re.M)
    return [g for g in guides if g not in ("index.md", "api.md")]


def test_every_guide_in_the_site_is_listed_in_the_readme_and_the_home_page():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read().split("## Guides", 1)[1]
    with open(os.path.join(ROOT, "docs", "index.md")) as f:
        home = f.read()
    guides = _nav_guides()
    assert "reliability.md" in guides and len(guides) >= 10
    for guide in guides:
        assert f"(docs/{guide})" in readme, guide
        assert f"({guide})" in home, guide
