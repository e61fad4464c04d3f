"""Sphinx configuration of the course's website (``python3 course.py site``, see ``helpers/authoring/website.py``).

The sources are staged by ``helpers.authoring.website`` (the README as index.md, the solution notebooks under notebooks/);
MyST-NB renders the notebooks' committed outputs and never executes them.
"""

import shutil
from pathlib import Path

import mathjax

from helpers.authoring.website import BRANCH, REPOSITORY

project = "Attention and Transformers from Scratch"
author = "the course's contributors"
copyright = "the course's contributors, MIT licence"

extensions = ["myst_nb", "sphinx.ext.githubpages"]  # githubpages: a .nojekyll file, so Pages serves _static/ as it is

# The committed solution notebooks are already executed (and checked by nbval); the site shows those outputs.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "html_image"]
myst_heading_anchors = 3
# A notebook's exercise headings (###) follow its section headings (##) but the first heading of a page is its # title;
# the README's badges are images inside links. Neither is a problem for the page.
suppress_warnings = ["myst.header", "myst.xref_missing"]

exclude_patterns = ["**.ipynb_checkpoints"]
master_doc = "index"
html_title = project
html_theme = "sphinx_book_theme"
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": BRANCH,
    "use_repository_button": True,
    "use_download_button": True,
    "use_fullscreen_button": False,
    # "Launch on Colab" opens notebooks/NN_topic.ipynb of the repository: the student notebook of the page
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "path_to_docs": "",
    "show_toc_level": 2,
}
html_last_updated_fmt = None
html_copy_source = True

# MathJax 3 from a PyPI package (django-static-mathjax ships MathJax 3.2.2 with its web fonts; nothing else of Django is
# used), copied into the site, so that the math renders with no network and no third-party CDN: the site can be read
# from a folder, offline. MathJax 3 is what the theme and MyST-NB are made for (Sphinx's default configuration).
MATHJAX = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
# the bundle the pages load and what it loads on demand (TeX extensions, fonts, the menu, accessibility); not the other
# bundles of the package
MATHJAX_PARTS = ("tex-mml-chtml.js", "input", "output", "ui", "a11y", "sre", "adaptors")
mathjax_path = "mathjax/tex-mml-chtml.js"  # relative to _static/
# A displayed formula wider than the text column scrolls sideways inside it instead of being cut off (_static/course.css).
html_static_path = ["_static"]
html_css_files = ["course.css"]


def _copy_mathjax(app, exception):
    if exception is None and app.builder.format == "html":
        target = Path(app.outdir) / "_static" / "mathjax"
        target.mkdir(parents=True, exist_ok=True)
        for part in MATHJAX_PARTS:
            source = MATHJAX / part
            if source.is_dir():
                shutil.copytree(source, target / part, dirs_exist_ok=True)
            else:
                shutil.copy2(source, target / part)


def setup(app):
    app.connect("build-finished", _copy_mathjax)
