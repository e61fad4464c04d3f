"""Build the course as a static website: the README as the home page, each executed solution notebook as a page.

    python -m helpers.authoring.website                 # into _site/ (git-ignored); or: python3 course.py site
    python -m helpers.authoring.website --out DIR       # elsewhere

Sphinx with MyST-NB (``docs/conf.py``) renders the committed outputs of ``notebooks/solutions/`` (figures, printed
results, math) and never executes a notebook, so the build is offline and takes seconds. The sources are staged in
``build/site/`` (git-ignored) first, written only when they change so that Sphinx rebuilds only what changed:

- ``index.md``: the README, its course map with a column of links to the student notebooks on GitHub (and a row for
  any notebook the map does not list yet); links to files that are not pages point at the file on GitHub;
- ``notebooks/NN_topic.ipynb``: each solution notebook, discovered, not listed. Its Colab badge opens the student
  notebook, a line under it links the student and solution notebooks on GitHub, and the Colab set-up cell is left out
  (it does nothing off Colab);
- ``guide/NAME.md``: the guides of ``docs/guide/`` (installing, instructors, the test suite, measurements), linked
  from the README.

The GitHub repository comes from the Colab set-up cell (``helpers.authoring.student.SETUP_CELL``), so a fork that changes it there
gets a site that links to itself. ``.github/workflows/pages.yml`` publishes ``_site/`` on each push to main.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from helpers.authoring.student import SETUP_CELL, SOLUTIONS_DIR
from helpers.runtime.session import ROOT

__all__ = ["BRANCH", "REPOSITORY", "SITE_DIR", "build", "main", "notebook_page", "site_index", "stage"]

#: The built site (git-ignored), what the Pages workflow uploads.
SITE_DIR = ROOT / "_site"
#: Where the sources are staged and Sphinx keeps its cache (``build/`` is git-ignored).
STAGE_DIR = ROOT / "build" / "site"
CONF_DIR = ROOT / "docs"
#: The guides (markdown), each a page of the site under guide/.
GUIDE_DIR = CONF_DIR / "guide"
#: ``https://github.com/OWNER/NAME``: the repository the Colab set-up cell clones.
REPOSITORY = re.search(r"https://github\.com/[\w.-]+/[\w.-]+", SETUP_CELL).group(0)
BRANCH = "main"
#: The guides in the order of the site's menu (any other guide follows, by name).
GUIDE_ORDER = ("install", "instructors", "testing", "measurements")
COLAB = "https://colab.research.google.com/github/" + REPOSITORY.removeprefix("https://github.com/")
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def _github(repo_path: str) -> str:
    return f"{REPOSITORY}/blob/{BRANCH}/{repo_path}"


def _colab(repo_path: str) -> str:
    return f"{COLAB}/blob/{BRANCH}/{repo_path}"


def _rewrite_links(text: str, where: str, pages: dict[str, str], page_dir: str) -> str:
    """Relative links: to a page of the site when the target is one, else to the file on GitHub.

    ``where`` is the folder of the text in the repository, ``pages`` maps repository paths to site paths, and
    ``page_dir`` is the folder of the text's own page in the site.
    """

    def replace(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):  # a URL, an anchor on the same page, an absolute path
            return match.group(0)
        path, _, fragment = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(where, path))
        if repo_path in pages:
            new = posixpath.relpath(pages[repo_path], page_dir or ".")
        else:
            new = _github(repo_path)
        return f"{match.group(1)}{new}{'#' + fragment if fragment else ''}{match.group(3)}"

    return _LINK.sub(replace, text)


def _title(solution: nbformat.NotebookNode, stem: str) -> str:
    first = next((c.source for c in solution.cells if c.cell_type == "markdown"), "")
    heading = next((line for line in first.splitlines() if line.startswith("# ")), f"# {stem}")
    return heading[2:].split("·", 1)[-1].strip()


def _guide_pages(guides: list[str]) -> dict[str, str]:
    """Repository paths of the guides -> their pages."""
    return {f"docs/guide/{name}.md": f"guide/{name}.md" for name in guides}


def _notebook_pages(notebooks) -> dict[str, str]:
    """Repository paths of the student and solution notebooks -> the solution notebook's page."""
    pages = {f"notebooks/{stem}.ipynb": f"notebooks/{stem}.ipynb" for stem in notebooks}
    return pages | {f"notebooks/solutions/{stem}.ipynb": f"notebooks/{stem}.ipynb" for stem in notebooks}


def guide_page(text: str, notebooks, guides: list[str]) -> str:
    """A guide of docs/guide/ as a page of the site: its relative links to pages stay pages, the rest go to GitHub."""
    return _rewrite_links(text, "docs/guide", _notebook_pages(notebooks) | _guide_pages(guides), "guide")


def site_index(readme: str, notebooks: dict[str, nbformat.NotebookNode], guides: list[str] | None = None) -> str:
    """The home page: the README, with a student-notebook column in the course map and a row per unlisted notebook."""
    guides = guides or []
    pages = _notebook_pages(notebooks) | _guide_pages(guides)
    lines = readme.splitlines()
    out: list[str] = []
    listed: set[str] = set()
    in_map = False
    for number, line in enumerate(lines):
        if re.match(r"^\|\s*#\s*\|\s*Notebook\s*\|", line):
            in_map = True
            out.append(line + " Student notebook |")
            continue
        if in_map and re.match(r"^\|[-:| ]+\|$", line):
            out.append(line + "---|")
            continue
        row = re.match(r"^\|\s*\d\d\s*\|.*\]\(notebooks/(\d\d_[\w-]+)\.ipynb\)", line) if in_map else None
        if row:
            listed.add(row.group(1))
            out.append(line + f" [{row.group(1)}.ipynb]({_github(f'notebooks/{row.group(1)}.ipynb')}) |")
            if not (number + 1 < len(lines) and lines[number + 1].startswith("|")):  # the last row: add the unlisted
                for stem in sorted(set(notebooks) - listed):
                    student = f"notebooks/{stem}.ipynb"
                    out.append(
                        f"| {stem[:2]} | [{_title(notebooks[stem], stem)}]({student}) | | | "
                        f"[![Open In Colab]({BADGE})]({_colab(student)}) | [{stem}.ipynb]({_github(student)}) |"
                    )
                in_map = False
            continue
        out.append(line)
    toctree = ["", "```{toctree}", ":caption: Notebooks", ":hidden:", ""] + [f"notebooks/{stem}" for stem in sorted(notebooks)]
    toctree += ["```"]
    if guides:
        toctree += ["", "```{toctree}", ":caption: Guides", ":hidden:", ""] + [f"guide/{name}" for name in guides] + ["```"]
    return _rewrite_links("\n".join(out + toctree) + "\n", "", pages, "")


def notebook_page(solution: nbformat.NotebookNode, stem: str, stems: list[str]) -> nbformat.NotebookNode:
    """A solution notebook as a page (a new object): Colab badge to the student notebook, GitHub links, no set-up cell."""
    nb = nbformat.from_dict(solution)
    pages = {f"notebooks/solutions/{s}.ipynb": f"notebooks/{s}.ipynb" for s in stems}
    student, worked = f"notebooks/{stem}.ipynb", f"notebooks/solutions/{stem}.ipynb"
    first = True
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _rewrite_links(
                cell.source.replace(_colab(worked), _colab(student)), "notebooks/solutions", pages, "notebooks"
            )
            if first:
                note = (
                    f"*This page shows the worked solutions with their outputs. To do the exercises, open the student "
                    f"notebook: [on Colab]({_colab(student)}) or [on GitHub]({_github(student)}) "
                    f"([the solution notebook]({_github(worked)})).*"
                )
                parts = cell.source.split("\n\n", 2)
                cell.source = "\n\n".join([*parts[:2], note, *parts[2:]])
                first = False
        elif cell.cell_type == "code" and cell.source.strip() == SETUP_CELL.strip():
            cell.metadata.setdefault("tags", []).append("remove-cell")  # Colab's set-up: nothing to read here
    return nb


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def stage(
    stage_dir: Path = STAGE_DIR / "source", solutions: Path = SOLUTIONS_DIR, readme: Path = ROOT / "README.md"
) -> list[str]:
    """Write the Sphinx sources (index.md, notebooks/NN_topic.ipynb, guide/NAME.md); returns the notebook stems."""
    paths = sorted(solutions.glob("[0-9][0-9]_*.ipynb"))
    notebooks = {p.stem: nbformat.read(p, as_version=4) for p in paths}
    stems = list(notebooks)
    guides = [name for name in GUIDE_ORDER if (GUIDE_DIR / f"{name}.md").exists()]
    guides += sorted(p.stem for p in GUIDE_DIR.glob("*.md") if p.stem not in guides)
    _write_if_changed(stage_dir / "index.md", site_index(readme.read_text(encoding="utf-8"), notebooks, guides))
    for name in guides:
        text = (GUIDE_DIR / f"{name}.md").read_text(encoding="utf-8")
        _write_if_changed(stage_dir / "guide" / f"{name}.md", guide_page(text, notebooks, guides))
    for stem, solution in notebooks.items():
        _write_if_changed(stage_dir / "notebooks" / f"{stem}.ipynb", nbformat.writes(notebook_page(solution, stem, stems)))
    for old in (stage_dir / "notebooks").glob("*.ipynb"):  # a notebook renamed or removed since the last build
        if old.stem not in notebooks:
            old.unlink()
    return stems


def build(out: Path = SITE_DIR, stage_dir: Path = STAGE_DIR, quiet: bool = True) -> float:
    """Stage the sources, run Sphinx and replace ``out`` by the site; returns the wall time in seconds.

    Raises RuntimeError when Sphinx fails, or when ``out`` is a non-empty folder that is not a site built here.
    """
    if out.exists() and any(out.iterdir()) and not (out / ".buildinfo").exists():
        raise RuntimeError(f"{out} is not empty and holds no site built by Sphinx: choose another --out (it is replaced)")
    start = time.perf_counter()
    stage(stage_dir / "source")
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(CONF_DIR), "-d", str(stage_dir / "doctrees")]
    command += ["-q"] if quiet else []
    # Sphinx writes into build/site/html (MyST-NB puts its copies of the outputs beside it, in jupyter_execute/), then the
    # result is mirrored into `out`
    command += [str(stage_dir / "source"), str(stage_dir / "html")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"sphinx-build failed (exit {result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(stage_dir / "html", out)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.authoring.website", description="Build the course's static website.")
    parser.add_argument("--out", type=Path, default=SITE_DIR, help="the output folder (default: _site/)")
    parser.add_argument("--stage", type=Path, default=STAGE_DIR, help="staged sources and Sphinx's cache (default: build/site/)")
    parser.add_argument("--clean", action="store_true", help="rebuild from scratch (drop the staged sources and the output)")
    args = parser.parse_args(argv)
    if args.clean:
        shutil.rmtree(args.stage, ignore_errors=True)
        shutil.rmtree(args.out, ignore_errors=True)
    try:
        seconds = build(args.out.resolve(), args.stage.resolve())
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    pages = sum(1 for page in args.out.rglob("*.html") if "_static" not in page.relative_to(args.out).parts)
    print(f"built {pages} pages into {args.out} in {seconds:.1f} s; open {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
