"""Error of a result in units in the last place, against a float64 reference.

The ulp is taken at the magnitude of the input pair ``hypot(x0, x1)``: a rotation's
rounding error scales with its input, and where an output cancels to near zero no
method can do better than that (issue 4, numerical-contract.rst, "Accuracy").
"""

from __future__ import annotations

from typing import Any

import numpy as np

FORMATS: dict[str, tuple[int, int, type[np.unsignedinteger[Any]]]] = {
    "float16": (5, 10, np.uint16),
    "bfloat16": (8, 7, np.uint16),
    "float32": (8, 23, np.uint32),
    "float64": (11, 52, np.uint64),
}
"""(exponent bits, explicit significand bits, unsigned type of the bit pattern) of each dtype."""


def ulp(magnitude: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    """The spacing of ``dtype`` at ``magnitude`` (>= the subnormal spacing)."""
    exponent_bits, significand_bits, _ = FORMATS[dtype]
    smallest_normal = 2.0 ** (2 - 2 ** (exponent_bits - 1))
    exponent = np.floor(np.log2(np.maximum(magnitude, smallest_normal)))
    return np.asarray(np.exp2(exponent - significand_bits))


def pair_indices(rotary_dim: int, interleaved: bool) -> tuple[Any, Any]:
    """The indices of the first and the second element of each rotated pair."""
    i = np.arange(rotary_dim // 2)
    return (2 * i, 2 * i + 1) if interleaved else (i, i + rotary_dim // 2)


def pair_magnitude(
    x: np.ndarray[Any, Any], rotary_dim: int, interleaved: bool
) -> np.ndarray[Any, Any]:
    """``hypot(x0, x1)`` of each element's pair; the element itself past ``rotary_dim``."""
    x = np.asarray(x, dtype=np.float64)
    first, second = pair_indices(rotary_dim, interleaved)
    magnitude: np.ndarray[Any, Any] = np.abs(x)
    pair = np.hypot(x[..., first], x[..., second])
    magnitude[..., first] = pair
    magnitude[..., second] = pair
    return magnitude


def max_ulp_error(
    result: np.ndarray[Any, Any],
    reference: np.ndarray[Any, Any],
    x: np.ndarray[Any, Any],
    *,
    dtype: str,
    rotary_dim: int,
    interleaved: bool,
) -> float:
    """Largest ``|result - reference|`` in ulps of ``dtype`` at the input pair's magnitude."""
    if result.size == 0:
        return 0.0
    error = np.abs(np.asarray(result, dtype=np.float64) - reference)
    scale = ulp(pair_magnitude(x, rotary_dim, interleaved), dtype)
    return float(np.max(error / scale))
