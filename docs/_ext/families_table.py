"""The table of transformers families on docs/model-families.rst, written at each build.

It reads what the test suite checks, so the page cannot drift from it: the families are
those ``tests/hf_families.py`` sweeps (every modeling file of the installed transformers
with a rotary class), and the outcome of each is the one ``tests/test_hf_families.py``
asserts: a match unless the family is listed there as refused with a clear error
(``CLEAR_ERRORS``) or not driven by the sweep (``NOT_DRIVEN``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

DOCS = Path(__file__).resolve().parents[1]
TESTS = DOCS.parent / "tests"
OUTPUT = DOCS / "generated" / "hf-families.rst"


def _test_dicts() -> dict[str, dict[str, str]]:
    """``NOT_DRIVEN`` and ``CLEAR_ERRORS`` of tests/test_hf_families.py, read without
    importing it (its import skips without torch)."""
    tree = ast.parse((TESTS / "test_hf_families.py").read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in {"NOT_DRIVEN", "CLEAR_ERRORS"}:
                found[name] = ast.literal_eval(node.value)
    return found


def _families() -> tuple[list[str], str]:
    """The swept families and the transformers version they come from."""
    sys.path.insert(0, str(TESTS))
    try:
        import hf_families
    finally:
        sys.path.remove(str(TESTS))
    try:
        import transformers
    except ImportError as error:
        raise ExtensionError(
            f"the model-families page lists transformers' families: install "
            f"transformers {hf_families.PINNED_TRANSFORMERS} (`nox -s docs` does)"
        ) from error
    return hf_families.rotary_families(), transformers.__version__


def _plain(text: str) -> str:
    """The test's text as rst text (its backticks and stars are not markup)."""
    return text.replace("`", "\\`").replace("*", "\\*")


def _says(message: str) -> str:
    """A part of anyrope's error message, as the test asserts it."""
    return f"says ``{message}``"


def table() -> str:
    """The page's rst: one row per family, and per layer type where the test lists one."""
    from anyrope.scaling.hf import INTERLEAVED_MODEL_TYPES

    listed = _test_dicts()
    not_driven, refused = listed["NOT_DRIVEN"], listed["CLEAR_ERRORS"]
    families, version = _families()
    rows = []
    for family in families:
        pairing = "interleaved" if family in INTERLEAVED_MODEL_TYPES else "half-split"
        if family in refused:
            rows.append((family, "refused with a clear error", _says(refused[family])))
        elif family in not_driven:
            rows.append((family, "not checked by the sweep", _plain(not_driven[family])))
        else:
            rows.append(
                (family, "matches", f":meth:`~anyrope.RoPE.from_hf_config`, {pairing} pairs")
            )
        for label in sorted(k for k in {**not_driven, **refused} if k.startswith(f"{family}[")):
            layer = label[len(family) + 1 : -1]
            if label in refused:
                rows.append(
                    (f"{family} ({layer})", "refused with a clear error", _says(refused[label]))
                )
            else:
                rows.append(
                    (f"{family} ({layer})", "not checked by the sweep", _plain(not_driven[label]))
                )
    counts: dict[str, int] = {}
    for _, outcome, _ in rows:
        counts[outcome] = counts.get(outcome, 0) + 1
    lines = [
        f"transformers {version}: {len(families)} families with a rotary class; "
        + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        + " (rows per family, and per layer type where one differs).",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 25 25 50",
        "",
        "   * - family (``model_type``)",
        "     - anyrope",
        "     - how, or why not",
    ]
    for family, outcome, detail in rows:
        lines += [f"   * - ``{family}``", f"     - {outcome}", f"     - {detail}"]
    return "\n".join(lines) + "\n"


def write_table(app: Sphinx) -> None:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    text = table()
    if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
        OUTPUT.write_text(text, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", write_table)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
