"""Sphinx configuration for the anyrope documentation.

The plots the pages show are drawn by the scripts in ``docs/plots/`` at the start of
every build (``builder-inited``) into ``docs/generated/plots/``, which git ignores:
no image is committed, so the pictures always match the code. The extensions in
``docs/_ext/`` render math to MathML (``mathml``: the pages fetch nothing), write the
model-families table from the test data (``families_table``) and fail the build if a
page would load anything from the network (``offline``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sphinx.application import Sphinx

DOCS = Path(__file__).resolve().parent
PLOTS = DOCS / "plots"
PLOT_OUTPUT = DOCS / "generated" / "plots"

sys.path.insert(0, str(DOCS.parent / "src"))
sys.path.insert(0, str(DOCS / "_ext"))

import anyrope  # noqa: E402  (after the path so a source checkout documents itself)

project = "anyrope"
author = "anyrope developers"
copyright = "anyrope developers"
release = anyrope.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "sphinx_copybutton",
    "mathml",
    "families_table",
    "offline",
]

html_math_renderer = "mathml"

autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

# Every reference must resolve (``-n``), except names of other projects: the build
# fetches nothing, so no other project's inventory is there to resolve them.
nitpicky = True
nitpick_ignore = [
    ("py:func", "numpy.random.default_rng"),  # NumPy's, no inventory offline
]

doctest_global_setup = "import numpy as np\nimport anyrope"
doctest_test_doctest_blocks = "default"

exclude_patterns = ["_build", "plots"]
templates_path = ["_templates"]

html_theme = "pydata_sphinx_theme"
html_title = f"anyrope {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    # One sidebar, on the left: every page of the site (site-nav.html; none hidden
    # under a "More" menu, no row of links in the header), then this page's sections.
    # The article takes the rest of the width.
    "navbar_center": [],
    "secondary_sidebar_items": [],
}
html_sidebars = {"**": ["site-nav.html", "page-toc.html"]}
html_static_path = ["_static"]
html_css_files = ["anyrope.css"]

# The copy button on code blocks leaves out the prompts and the output of examples.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True


def draw_plots(app: Sphinx) -> None:
    """Run every ``docs/plots/plot_*.py`` as ``python SCRIPT OUTPUT_DIR``."""
    PLOT_OUTPUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(DOCS.parent / "src"), env.get("PYTHONPATH", "")) if p
    )
    for script in sorted(PLOTS.glob("plot_*.py")):
        subprocess.run([sys.executable, str(script), str(PLOT_OUTPUT)], check=True, env=env)


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", draw_plots)
