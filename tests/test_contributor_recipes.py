"""The recipes of docs/architecture.rst, followed literally on a copy of the source."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyrope
from goldens import CASES

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


def rejects(plan: Plan) -> str | None:
    if plan.library != "numpy":
        return f"needs NumPy arrays; got {plan.library} arrays"
    return None


def run(plan: Plan) -> tuple[Array, ...]:
    cos, sin = plan.gathered_tables()
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
