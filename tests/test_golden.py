"""Every backend and path reproduces the golden files bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import anyrope

GOLDEN = Path(__file__).parent / "golden"
CASES = json.loads((GOLDEN / "cases.json").read_text())
DATA = np.load(GOLDEN / "golden.npz")


def _case_id(case: dict) -> str:
    pairing = "interleaved" if case["interleaved"] else "half"
    rotary = "full" if case["rotary_dim"] == case["head_dim"] else f"r{case['rotary_dim']}"
    positions = (
        case["positions"]
        if isinstance(case["positions"], str)
        else ("default" if case["positions"] is None else "offset")
    )
    parts = (case["name"], case["dtype"], pairing, case["layout"], f"d{case['head_dim']}")
    return "-".join((*parts, rotary, positions))


def _run(backend, case, impl):
    if case["dtype"] not in backend.dtype_names:
        pytest.skip(f"{backend.name} has no {case['dtype']}")
    x = backend.from_bits(DATA[f"{case['name']}_x"], case["dtype"])
    positions = case["positions"]
    if positions == "array":
        positions = backend.from_numpy(DATA[f"{case['name']}_positions"])
    y = anyrope.rotate(
        x,
        positions,
        rotary_dim=case["rotary_dim"],
        base=case["base"],
        interleaved=case["interleaved"],
        layout=case["layout"],
        impl=impl,
    )
    assert y.dtype == x.dtype
    assert tuple(y.shape) == tuple(case["shape"])
    return backend.to_bits(y)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("impl", ["auto", "array_api"])
def test_golden_bits(backend, case, impl):
    got = _run(backend, case, impl)
    np.testing.assert_array_equal(got, DATA[f"{case['name']}_y"])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_golden_bits_blocked(backend, case):
    if backend.name not in ("numpy", "torch") or backend.device_label != "cpu":
        pytest.skip("the blocked path takes NumPy arrays and PyTorch CPU tensors only")
    got = _run(backend, case, "blocked")
    np.testing.assert_array_equal(got, DATA[f"{case['name']}_y"])
