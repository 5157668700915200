"""The golden files (``tests/golden``) and how every test compares with them.

Bits are compared exactly. The one allowance is NaN's payload, which IEEE-754 leaves to the hardware
(x86 and Arm produce different default NaNs for ``inf - inf``): a NaN must come out where the golden
file has one, whatever its payload (numerical-contract.rst, "What is identical, and what is not").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

import anyrope

GOLDEN = Path(__file__).parent / "golden"
CASES: list[dict[str, Any]] = json.loads((GOLDEN / "cases.json").read_text())
TABLES: list[dict[str, Any]] = json.loads((GOLDEN / "tables.json").read_text())
DATA = np.load(GOLDEN / "golden.npz")

# (exponent mask, significand mask) of each format's bit pattern.
_NAN_MASKS = {
    "float16": (0x7C00, 0x03FF),
    "bfloat16": (0x7F80, 0x007F),
    "float32": (0x7F800000, 0x007FFFFF),
    "float64": (0x7FF0000000000000, 0x000FFFFFFFFFFFFF),
}


def case_id(case: dict[str, Any]) -> str:
    """A readable test id: name, kind, dtype, pairing, layout, widths and positions."""
    pairing = "interleaved" if case["interleaved"] else "half"
    rotary = "full" if case["rotary_dim"] == case["head_dim"] else f"r{case['rotary_dim']}"
    positions = (
        case["positions"]
        if isinstance(case["positions"], str)
        else ("default" if case["positions"] is None else "offset")
    )
    parts = (case["name"], case["kind"], case["dtype"], pairing, case["layout"])
    return "-".join((*parts, f"d{case['head_dim']}", rotary, positions))


def rope_options(case: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :func:`anyrope.rotate` for a rotation case."""
    keys = ("rotary_dim", "base", "interleaved", "layout", "scaling", "max_position_embeddings")
    return {key: case[key] for key in keys if key in case}


def rotate_case(case: dict[str, Any], x: Any, positions: Any, **kwargs: Any) -> Any:
    """``anyrope.rotate`` of one case's input (and its positions array) on any backend."""
    return anyrope.rotate(x, positions, **rope_options(case), **kwargs)


def is_nan_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Where the bit patterns of ``dtype`` are NaN."""
    exponent, significand = (bits.dtype.type(mask) for mask in _NAN_MASKS[dtype])
    return ((bits & exponent) == exponent) & ((bits & significand) != 0)


def assert_same_bits(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """Bit for bit, except that any NaN matches any NaN."""
    assert got.shape == want.shape, (got.shape, want.shape)
    got_nan, want_nan = is_nan_bits(got, dtype), is_nan_bits(want, dtype)
    np.testing.assert_array_equal(got_nan, want_nan, err_msg="NaN in different places")
    np.testing.assert_array_equal(np.where(got_nan, 0, got), np.where(want_nan, 0, want))
