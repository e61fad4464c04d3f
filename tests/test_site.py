"""The course as a website: one build (Sphinx + MyST-NB, offline, nothing executed), its pages and links, the Pages workflow.

The build goes to a temporary folder, once for the module: every solution notebook (discovered) must have its page with
its figures and math, the home page must carry the course map with Colab badges and links to the student notebooks, and
every internal link (href or src to a local file, and its #anchor) must resolve.
"""

from __future__ import annotations

import html as html_module
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from helpers import ROOT
from helpers.authoring.student import SOLUTIONS_DIR
from helpers.authoring.website import REPOSITORY

pytest.importorskip("myst_nb", reason="MyST-NB is installed from requirements.txt")

NOTEBOOKS = sorted(p.stem for p in SOLUTIONS_DIR.glob("[0-9][0-9]_*.ipynb"))


class _Page(HTMLParser):
    """The links (href, src) and the ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value and tag != "base":
                self.links.append(value)
            elif name in ("id", "name") and value:
                self.ids.add(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One build with the command course.py site runs (python -m helpers.authoring.website), into a temporary folder."""
    root = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "helpers.authoring.website", "--out", str(root / "html"), "--stage", str(root / "stage")]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    pages = sorted(p for p in (root / "html").rglob("*.html") if "_static" not in p.parts)
    assert re.search(rf"^built {len(pages)} pages into .* in \d+\.\d s", result.stdout, re.M), result.stdout
    print(result.stdout.strip())
    assert "WARNING" not in result.stderr, result.stderr  # a broken reference or an unrenderable output
    return root / "html"


def test_every_notebook_has_a_page_with_its_outputs(site):
    assert NOTEBOOKS, "no solution notebook found"
    for stem in NOTEBOOKS:
        page = site / "notebooks" / f"{stem}.html"
        assert page.exists(), f"no page for {stem}"
        html = page.read_text(encoding="utf-8")
        assert "cell_output" in html, f"{stem}: no outputs rendered"
        links = _parse(page).links
        student = f"{REPOSITORY}/blob/main/notebooks/{stem}.ipynb"
        assert student in links, f"{stem}: no link to the student notebook on GitHub"
        assert f"https://colab.research.google.com/github/{REPOSITORY[19:]}/blob/main/notebooks/{stem}.ipynb" in links
        assert not [link for link in links if "colab.research" in link and "/solutions/" in link]  # no badge to a solution
        assert "cell_input" in html and "google.colab" not in html  # the code is shown, Colab's set-up cell left out


def test_figures_and_math_are_rendered(site):
    figures = list((site / "_images").glob("*.png"))
    assert len(figures) >= len(NOTEBOOKS), "the notebooks' figures are missing"
    html = (site / "notebooks" / f"{NOTEBOOKS[0]}.html").read_text(encoding="utf-8")
    assert "_images/" in html and 'class="math' in html, "figures or math are not rendered"
    assert (site / "_static" / "mathjax" / "tex-mml-chtml.js").is_file() and "cdn." not in html  # MathJax 3 in the site: offline
    fonts = site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert (fonts / "MathJax_AMS-Regular.woff").is_file()  # its fonts too (MathJax 2.7 asked for an .otf that was missing)


# --- formulas in a real browser ---------------------------------------------------------------------------------

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)
# the widths of a laptop's window and of a narrow one, where the theme's layout changes
WIDTHS = [1280, 720]


def _formula_report(site: Path, pages: list[str], widths: list[int], extra_css: str = "") -> list[dict]:
    """Open ``pages`` of the built site at each width in headless Chromium; what tests/site_overflow.html measured."""
    harness = (ROOT / "tests" / "site_overflow.html").read_text(encoding="utf-8")
    harness = harness.replace("__PAGES__", json.dumps(pages)).replace("__WIDTHS__", json.dumps(widths))
    probe = site / "_course_overflow_probe.html"
    probe.write_text(harness.replace("__EXTRA_CSS__", json.dumps(extra_css)), encoding="utf-8")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    flags += ["--disable-sync", "--no-first-run", "--allow-file-access-from-files", "--virtual-time-budget=300000"]
    try:
        result = subprocess.run(
            [CHROMIUM, *flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=300, cwd=site
        )
    finally:
        probe.unlink()
    found = re.search(r'data-course-report="([^"]*)"', result.stdout)
    assert found, f"Chromium returned no report (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(html_module.unescape(found.group(1)))


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt install chromium; .ci/run installs it)")
def test_no_formula_overflows_its_column_in_a_real_browser(site):
    pages = [f"notebooks/{stem}.html" for stem in NOTEBOOKS] + ["index.html"]
    report = _formula_report(site, pages, WIDTHS)
    assert len(report) == len(pages) * len(WIDTHS)
    overflowing = [f"{r['page']} at {r['width']} px: {o}" for r in report for o in r["overflowing"]]
    assert not overflowing, "\n".join(overflowing)
    typeset = {r["page"]: r for r in report if r["width"] == WIDTHS[0]}
    for stem in NOTEBOOKS:  # every notebook page has its formulas typeset by the site's own MathJax 3
        assert typeset[f"notebooks/{stem}.html"]["mathjax"] == "3.2.2", typeset[f"notebooks/{stem}.html"]
    assert sum(r["formulas"] for r in typeset.values()) > 100


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt install chromium; .ci/run installs it)")
def test_the_browser_check_sees_a_formula_cut_off(site):
    """The control: without the site's scrolling rule, 04's wide formulas stick out of a narrow column, and are seen."""
    (result,) = _formula_report(
        site, ["notebooks/04_multi_head_attention.html"], [720], "div.math, mjx-container { overflow: visible !important; }"
    )
    assert any("softargmax" in o["formula"] for o in result["overflowing"]), result


def test_home_page_has_the_course_map(site):
    page = _parse(site / "index.html")
    for stem in NOTEBOOKS:
        assert f"notebooks/{stem}.html" in page.links, f"the course map does not link the page of {stem}"
        assert f"{REPOSITORY}/blob/main/notebooks/{stem}.ipynb" in page.links, f"no student-notebook link for {stem}"
    assert sum("colab.research.google.com/github/" in link for link in page.links) >= len(NOTEBOOKS)
    assert f"{REPOSITORY}/blob/main/CONTRIBUTING.md" in page.links  # a file that is not a page: on GitHub


def test_every_internal_link_resolves(site):
    parsed: dict[Path, _Page] = {}
    broken = []
    for html in sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts):  # no theme templates
        for link in _parse(html).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith("mailto:"):
                continue  # external
            target = (html.parent / unquote(parts.path)).resolve() if parts.path else html
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or not target.is_relative_to(site.resolve()):
                broken.append(f"{html.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html":
                if target not in parsed:
                    parsed[target] = _parse(target)
                if unquote(parts.fragment) not in parsed[target].ids:
                    broken.append(f"{html.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_site_index_adds_unlisted_notebooks_and_rewrites_links():
    import nbformat
    from nbformat.v4 import new_markdown_cell, new_notebook

    from helpers.authoring.website import site_index

    readme = (
        "# Course\n\nSee [the guide](CONTRIBUTING.md).\n\n| # | Notebook | What you build | Time | Colab |\n|---|---|---|---|---|\n"
        "| 01 | [One](notebooks/01_one.ipynb) | x | 5 min | badge |\n\nAfter.\n"
    )
    notebooks = {
        "01_one": new_notebook(cells=[new_markdown_cell("# 01 · One")]),
        "02_two": new_notebook(cells=[new_markdown_cell("# 02 · Two things")]),
    }
    text = site_index(readme, notebooks)
    assert f"[the guide]({REPOSITORY}/blob/main/CONTRIBUTING.md)" in text
    assert "| # | Notebook | What you build | Time | Colab | Student notebook |" in text and "|---|---|---|---|---|---|" in text
    assert (
        f"| 01 | [One](notebooks/01_one.ipynb) | x | 5 min | badge | [01_one.ipynb]({REPOSITORY}/blob/main/notebooks/01_one.ipynb) |"
        in text
    )
    assert "| 02 | [Two things](notebooks/02_two.ipynb) |" in text and text.index("02_two") < text.index("After.")
    assert "notebooks/01_one\nnotebooks/02_two\n```" in text  # the navigation
    assert nbformat.validate(notebooks["02_two"]) is None


# --- the Pages workflow -----------------------------------------------------------------------------------------

PAGES = ROOT / ".github" / "workflows" / "pages.yml"


def test_pages_workflow_is_valid_and_publishes_main():
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is installed from requirements.txt")
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(PAGES)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    workflow = yaml.safe_load(PAGES.read_text())
    on = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
    assert on["push"] == {"branches": ["main"]} and "workflow_dispatch" in on
    assert workflow["permissions"] == {"contents": "read"}  # the deploy job alone may write Pages
    build_job, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert any(step.get("run") == "python3 course.py site" for step in build_job["steps"])
    (upload,) = [s for s in build_job["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "_site"
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    for job in (build_job, deploy):
        assert job.get("timeout-minutes", 360) <= 60


def test_the_build_never_replaces_a_folder_that_is_not_a_site(tmp_path):
    from helpers.authoring.website import build

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="holds no site built by Sphinx"):
        build(tmp_path, stage_dir=tmp_path / "stage")
    assert (tmp_path / "notes.txt").read_text() == "mine" and not (tmp_path / "stage").exists()
