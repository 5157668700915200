"""Every script in ``examples/`` runs to completion in its own process.

An example whose library or device is missing prints ``skipped: <reason>`` and exits 0;
that becomes a pytest skip with the same reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from subprocess_run import run_python

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.py"))


def test_examples_exist():
    assert {p.stem for p in EXAMPLES} >= {
        "numpy_transformer_block",
        "cupy_without_torch",
        "jax_jit",
        "port_llama_attention",
    }


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(script):
    result = run_python(str(script))
    assert result.returncode == 0, result.stdout + result.stderr
    if result.stdout.startswith("skipped: "):
        pytest.skip(result.stdout.removeprefix("skipped: ").strip())
    assert result.stdout.strip(), "an example says what it checked"
