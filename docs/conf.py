"""Sphinx configuration for the anyrope documentation.

The plots the pages show are drawn by the scripts in ``docs/plots/`` at the start of
every build (``builder-inited``) into ``docs/generated/plots/``, which git ignores:
no image is committed, so the pictures always match the code.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from sphinx.application import Sphinx

DOCS = Path(__file__).resolve().parent
PLOTS = DOCS / "plots"
PLOT_OUTPUT = DOCS / "generated" / "plots"

sys.path.insert(0, str(DOCS.parent / "src"))

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
    "sphinx.ext.mathjax",
    "numpydoc",
]

autosummary_generate = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

doctest_global_setup = "import numpy as np\nimport anyrope"
doctest_test_doctest_blocks = "default"

exclude_patterns = ["_build", "plots", "examples"]
templates_path: list[str] = []
# Pages written alongside this site by other work; the index lists them, and a build
# without them drops their toctree lines instead of failing (see drop_missing_pages).
OPTIONAL_PAGES = ("scaling", "attention")

html_theme = "pydata_sphinx_theme"
html_title = f"anyrope {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path: list[str] = []


def draw_plots(app: Sphinx) -> None:
    """Run every ``docs/plots/plot_*.py`` as ``python SCRIPT OUTPUT_DIR``."""
    PLOT_OUTPUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(DOCS.parent / "src"), env.get("PYTHONPATH", "")) if p
    )
    for script in sorted(PLOTS.glob("plot_*.py")):
        subprocess.run([sys.executable, str(script), str(PLOT_OUTPUT)], check=True, env=env)


def drop_missing_pages(app: Sphinx, docname: str, source: list[str]) -> None:
    """Remove the index's toctree lines of optional pages that have no source file."""
    if docname != "index":
        return
    for page in OPTIONAL_PAGES:
        if not any(DOCS.glob(f"{page}.*")):
            source[0] = source[0].replace(f"\n   {page}\n", "\n")


def add_docs_examples(app: Sphinx, docname: str, source: list[str]) -> None:
    """Append every ``docs/examples/*.py`` to the examples page, titled by its docstring."""
    if docname != "examples":
        return
    for script in sorted((DOCS / "examples").glob("*.py")):
        docstring = ast.get_docstring(ast.parse(script.read_text()))
        title = docstring.splitlines()[0].rstrip(".") if docstring else script.stem
        source[0] += (
            f"\n{title}\n{'-' * len(title)}\n\n"
            f".. literalinclude:: examples/{script.name}\n   :language: python\n"
        )


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", draw_plots)
    app.connect("source-read", drop_missing_pages)
    app.connect("source-read", add_docs_examples)
