"""Sphinx configuration of the course's website (``python3 course.py site``, see ``helpers/website.py``).

The sources are staged by ``helpers.website`` (the README as index.md, the solution notebooks under notebooks/);
MyST-NB renders the notebooks' committed outputs and never executes them.
"""

import shutil
from pathlib import Path

import jupyter_server_mathjax

from helpers.website import BRANCH, REPOSITORY

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

# MathJax from a PyPI package (jupyter-server-mathjax: MathJax 2.7 and its STIX web fonts), copied into the site, so
# that the math renders with no network and no third-party CDN: the site can be read from a folder, offline.
MATHJAX = Path(jupyter_server_mathjax.__file__).parent / "static"
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"  # relative to _static/
# MathJax 2 reads MathJax.Hub.Config (Sphinx writes mathjax2_config there), not the MathJax 3 object MyST-NB would set:
# typeset Sphinx's math spans (class "math") and the notebooks' outputs, with the fonts the package ships (as Jupyter's
# classic notebook did).
mathjax3_config = None
mathjax2_config = {
    "tex2jax": {"processClass": "math|output_area", "ignoreClass": "document", "processEscapes": True},
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None},
}


def _copy_mathjax(app, exception):
    if exception is None and app.builder.format == "html":
        shutil.copytree(MATHJAX, Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def setup(app):
    app.connect("build-finished", _copy_mathjax)
