"""``python -m anyrope check``: the same bits on every installed backend, and how accurate.

For every backend installed here (NumPy always; PyTorch on the CPU; PyTorch CUDA, CuPy
and array-api-strict where present), every dtype it has and both pairings, anyrope is
applied to the same data and compared with

- the NumPy result, bit for bit (for bfloat16 without ml_dtypes: NumPy's float32 result
  rounded to bfloat16, which is what the numerical contract prescribes), and
- a float64 oracle (the complex-number form), as the largest error in ulps at the
  magnitude of the input pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._accuracy import max_ulp_error
from ._backends import (
    Backend,
    bfloat16_bits_to_float32,
    float32_to_bfloat16_bits,
    known_backends,
    numpy_dtype,
)
from ._functional import rotate

SHAPE = (2, 33, 4, 128)
ROTARY_DIM = 96
BASE = 500000.0
HALF_BOUND = 0.51


@dataclass(frozen=True)
class Row:
    """One line of the check: a backend, dtype and pairing, and what was found."""

    backend: str
    device: str
    dtype: str
    pairing: str
    identical: bool
    max_ulp: float
    path: str

    @property
    def ok(self) -> bool:
        bound_ok = self.max_ulp <= HALF_BOUND if self.dtype in ("float16", "bfloat16") else True
        return self.identical and bound_ok


def _inputs(dtype: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Input bits, the same values in float64, and positions up to 2**20."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal(SHAPE)
    positions = rng.integers(0, 2**20, size=SHAPE[:2])
    if dtype == "bfloat16":
        bits = float32_to_bfloat16_bits(values.astype(np.float32))
        return bits, bfloat16_bits_to_float32(bits).astype(np.float64), positions
    typed = values.astype(dtype)
    return typed.view(f"u{typed.itemsize}"), typed.astype(np.float64), positions


def _reference_bits(
    bits: np.ndarray[Any, Any], dtype: str, positions: np.ndarray[Any, Any], interleaved: bool
) -> np.ndarray[Any, Any]:
    """The NumPy result's bits (bfloat16 without ml_dtypes: float32 result, rounded once)."""
    native = numpy_dtype(dtype)
    x = bits.view(native) if native is not None else bfloat16_bits_to_float32(bits)
    y = rotate(x, positions, rotary_dim=ROTARY_DIM, base=BASE, interleaved=interleaved)
    if native is None:
        return float32_to_bfloat16_bits(y)
    return np.ascontiguousarray(y).view(bits.dtype)


def _oracle(
    x: np.ndarray[Any, Any], positions: np.ndarray[Any, Any], interleaved: bool
) -> np.ndarray[Any, Any]:
    half = ROTARY_DIM // 2
    i = np.arange(half)
    first, second = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
    # The contract defines theta and the float64 angle; the oracle rotates by it exactly.
    theta = BASE ** (-(2.0 * i) / ROTARY_DIM)
    turn = np.exp(1j * positions[..., None] * theta)[..., None, :]
    z = (x[..., first] + 1j * x[..., second]) * turn
    y = x.copy()
    y[..., first], y[..., second] = z.real, z.imag
    return y


def _path(backend: Backend) -> str:
    if backend.name == "numpy" or (backend.name == "torch" and backend.device_label == "cpu"):
        return "blocked"
    return "array_api"


def run_check() -> list[Row]:
    """Run the check on every usable backend and return its rows."""
    rows = []
    backends = [b for b in known_backends() if b.unavailable is None]
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        bits, x64, positions = _inputs(dtype)
        for interleaved in (False, True):
            reference = _reference_bits(bits, dtype, positions, interleaved)
            oracle = _oracle(x64, positions, interleaved)
            for backend in backends:
                if dtype not in backend.dtype_names:
                    continue
                y = rotate(
                    backend.from_bits(bits, dtype),
                    backend.from_numpy(positions),
                    rotary_dim=ROTARY_DIM,
                    base=BASE,
                    interleaved=interleaved,
                )
                got = backend.to_bits(y)
                error = max_ulp_error(
                    backend.to_numpy(y),
                    oracle,
                    x64,
                    dtype=dtype,
                    rotary_dim=ROTARY_DIM,
                    interleaved=interleaved,
                )
                rows.append(
                    Row(
                        backend.name,
                        backend.device_label,
                        dtype,
                        "interleaved" if interleaved else "half-split",
                        bool(np.array_equal(got, reference)),
                        error,
                        _path(backend),
                    )
                )
    return rows


def unavailable_backends() -> list[tuple[str, str]]:
    """(backend id, reason) for each backend that is not checked here."""
    return [(b.id, b.unavailable) for b in known_backends() if b.unavailable is not None]


def format_rows(rows: list[Row]) -> str:
    """The rows as an aligned text table."""
    header = ("backend", "device", "dtype", "pairing", "path", "identical", "max ulp", "status")
    lines = [
        (
            r.backend,
            r.device,
            r.dtype,
            r.pairing,
            r.path,
            "yes" if r.identical else "NO",
            f"{r.max_ulp:.3f}",
            "ok" if r.ok else "FAIL",
        )
        for r in rows
    ]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *lines, strict=True)]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True))
        for line in (header, *lines)
    )
