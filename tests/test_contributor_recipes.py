"""The recipes of docs/architecture.rst, followed as written on a copy of the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import anyrope
from goldens import CASES

ARCHITECTURE = Path(__file__).parents[1] / "docs" / "architecture.rst"


def test_add_a_scaling_method(tmp_path: Path) -> None:
    """The recipe "Adding a scaling method": the page's module, dropped into a copy of the package
    and nothing else edited, is read from a dict and from a model config, takes its new
    key, and refuses a key it does not take."""
    page = ARCHITECTURE.read_text()
    recipe = page[page.index("**Adding a scaling method**") :]
    block = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", recipe)
    assert block is not None, "the recipe has no code block"
    package = tmp_path / "anyrope"
    shutil.copytree(
        Path(anyrope.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    (package / "scaling" / "stretch.py").write_text(textwrap.dedent(block.group(1)))
    check = textwrap.dedent(
        """
        import numpy as np
        import pytest
        import anyrope
        from anyrope.scaling import ROPE_TYPES, default

        assert anyrope.__file__.startswith(sys.argv[1]), anyrope.__file__
        assert "stretch" in ROPE_TYPES
        unscaled = default.inv_freq(64, 10000.0)
        rope = anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0, "alpha": 1.5})
        assert type(rope.scaling).__name__ == "Stretch"
        np.testing.assert_array_equal(rope.inv_freq, unscaled / 3.0)
        config = {"head_dim": 64, "max_position_embeddings": 4096,
                  "rope_scaling": {"type": "stretch", "factor": 2, "alpha": 4}}
        hf = anyrope.RoPE.from_hf_config(config)
        assert (hf.scaling.alpha, hf.max_position_embeddings) == (4.0, 4096)
        np.testing.assert_array_equal(hf.inv_freq, unscaled / 8.0)
        default_alpha = anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0})
        np.testing.assert_array_equal(default_alpha.inv_freq, unscaled / 2.0)
        with pytest.raises(ValueError, match=r"rope_type='stretch' does not use `beta`; "
                           r"its keys are alpha, factor, "):
            anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0, "beta": 1.0})
        with pytest.raises(ValueError, match=r"`factor` is required for rope_type='stretch'"):
            anyrope.RoPE(64, scaling={"rope_type": "stretch", "alpha": 2.0})
        with pytest.raises(TypeError, match=r"`alpha` must be a real number"):
            anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0, "alpha": "2"})
        print("recipe ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", "import sys\n" + check, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
        check=False,
    )
    assert result.stdout.strip() == "recipe ok", result.stderr


SOURCE = Path(anyrope.__file__).parent
ROOT = Path(__file__).parents[1]

TOY_PATH = '''"""A toy path: NumPy arrays, every pair by the one formula."""

from __future__ import annotations

import numpy as np

from .._namespace import Array
from .._plan import Plan
from .rotation import halves, rotate_pair

NAME = "toy"
CHECKS_POSITIONS = False
TABLES = "placed"


def rejects(plan: Plan) -> str | None:
    if plan.library != "numpy":
        return f"needs NumPy arrays; got {plan.library} arrays"
    return None


def run(plan: Plan) -> tuple[Array, ...]:
    cos, sin, _, _ = plan.tables
    sin = -sin if plan.inverse else sin
    results = []
    for x in plan.arrays:
        y = x if plan.inplace else x.copy()
        x0, x1 = (h.astype(cos.dtype) for h in halves(x, plan.rotary_dim, plan.interleaved))
        y0, y1 = halves(y, plan.rotary_dim, plan.interleaved)
        with np.errstate(invalid="ignore", over="ignore"):
            y0[...], y1[...] = rotate_pair(x0, x1, cos, sin)
        results.append(y)
    return tuple(results)
'''


def test_add_a_path(tmp_path: Path) -> None:
    """docs/architecture.rst, "Adding a path": a module, its entry in ``AUTO_ORDER`` and in
    the independence contract, and the golden tests run it with no edit to the tests."""
    text = (ROOT / "docs" / "architecture.rst").read_text()
    recipe = text.split("**Adding a path**")[1].split("\nScaling methods\n")[0]
    for step in ("_paths/rotation.py", "AUTO_ORDER", "pyproject.toml", "tests/test_golden.py"):
        assert step in recipe, step
    src = tmp_path / "src"
    shutil.copytree(SOURCE, src / "anyrope", ignore=shutil.ignore_patterns("__pycache__"))
    paths = src / "anyrope" / "_paths"
    # 1. The module, computing with the canonical arithmetic.
    (paths / "toy.py").write_text(TOY_PATH)
    # 2. Its entry in the registry, where impl="auto" tries it: before the reference.
    registry = (paths / "__init__.py").read_text()
    registry, imported = re.subn(
        r"from \. import ([\w, ]+)\n", r"from . import \1, toy\n", registry
    )
    registry, entered = re.subn(
        r"(AUTO_ORDER: .*= \(.*)reference\)", r"\1toy, reference)", registry
    )
    assert (imported, entered) == (1, 1)
    (paths / "__init__.py").write_text(registry)
    # 3. The independence contract.
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject, contracted = re.subn(
        r'(modules = \[\n  "anyrope\._paths\.reference",\n)',
        r'\1  "anyrope._paths.toy",\n',
        pyproject,
    )
    assert contracted == 1
    (tmp_path / "pyproject.toml").write_text(pyproject)
    env = {**os.environ, "PYTHONPATH": str(src)}
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is not None:
        checked = subprocess.run(
            [lint], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # 4. The golden files through it, by the golden tests as they are.
    golden = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_golden.py"),
            "-k",
            "toy and numpy",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert golden.returncode == 0, golden.stdout[-3000:] + golden.stderr[-3000:]
    # Every golden case of NumPy ran through the toy path: none skipped.
    assert re.search(rf"\b{len(CASES)} passed,", golden.stdout), golden.stdout[-3000:]
