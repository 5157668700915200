"""Error of a result in units in the last place, against a float64 reference.

The ulp is taken at the magnitude of the input pair ``hypot(x0, x1)``: a rotation's
rounding error scales with its input, and where an output cancels to near zero no
method can do better than that (issue 4, numerical-contract.rst, "Accuracy").
"""

from __future__ import annotations

from typing import Any

import numpy as np

# (explicit mantissa bits, smallest normal exponent) of each dtype.
_FORMATS = {
    "float16": (10, -14),
    "bfloat16": (7, -126),
    "float32": (23, -126),
    "float64": (52, -1022),
}


def ulp(magnitude: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    """The spacing of ``dtype`` at ``magnitude`` (>= the subnormal spacing)."""
    mantissa, emin = _FORMATS[dtype]
    exponent = np.floor(np.log2(np.maximum(magnitude, 2.0**emin)))
    return np.asarray(np.exp2(exponent - mantissa))


def pair_magnitude(
    x: np.ndarray[Any, Any], rotary_dim: int, interleaved: bool
) -> np.ndarray[Any, Any]:
    """``hypot(x0, x1)`` of each element's pair; the element itself past ``rotary_dim``."""
    x = np.asarray(x, dtype=np.float64)
    half = rotary_dim // 2
    i = np.arange(half)
    first, second = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
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
