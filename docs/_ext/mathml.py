"""Math rendered to MathML when the pages are built.

Browsers draw MathML themselves, so a page with formulas loads no script and fetches
nothing: the math reads the same offline as online.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from latex2mathml.converter import convert
from sphinx.application import Sphinx


def _inline(translator: Any, node: nodes.Element) -> None:
    translator.body.append(convert(node.astext()))
    raise nodes.SkipNode


def _block(translator: Any, node: nodes.Element) -> None:
    translator.body.append(translator.starttag(node, "div", CLASS="math notranslate"))
    translator.body.append(convert(node.astext(), display="block"))
    translator.body.append("</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_html_math_renderer("mathml", (_inline, None), (_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
