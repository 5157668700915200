"""Regenerate the golden files from the NumPy path: ``python tests/golden/generate.py``.

Each case stores its input, positions and expected output as raw bits (so bfloat16 and
the exact float16 payloads survive), plus its options in ``cases.json``. Every backend's
test session compares its output with these bits exactly. Needs ml_dtypes for bfloat16.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import ml_dtypes
import numpy as np

import anyrope
from anyrope._backends import float32_to_bfloat16_bits

HERE = Path(__file__).parent
DTYPES = ("float16", "bfloat16", "float32", "float64")
BITS = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}
HEAD_DIMS = (64, 80, 96, 128, 256)
POSITION_KINDS = ("default", "offset", "random")


def _input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    values = rng.standard_normal(shape) * rng.choice([0.01, 1.0, 300.0], size=shape)
    if dtype == "float64":
        return values.view(np.uint64)
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(values.astype(np.float32))
    return values.astype(dtype).view(BITS[dtype])


def _positions(rng: np.random.Generator, kind: str, batch: int, seq: int) -> object:
    if kind == "default":
        return None
    if kind == "offset":
        return int(rng.integers(1, 5000))
    return rng.integers(0, 2**20, size=(batch, seq), dtype=np.int64)


def main() -> None:
    rng = np.random.default_rng(20261123)
    cases = []
    arrays: dict[str, np.ndarray] = {}
    combos = itertools.product(DTYPES, (False, True), ("bshd", "bhsd", "sbhd"), ("full", "partial"))
    for number, (dtype, interleaved, layout, rotary) in enumerate(combos):
        head_dim = HEAD_DIMS[number % len(HEAD_DIMS)]
        rotary_dim = head_dim if rotary == "full" else head_dim // 2 - (head_dim // 2) % 2
        seq = (1, 7, 5)[number % 3]
        batch, heads = 2, 3
        shape = {
            "bshd": (batch, seq, heads, head_dim),
            "bhsd": (batch, heads, seq, head_dim),
            "sbhd": (seq, batch, heads, head_dim),
        }[layout]
        kind = POSITION_KINDS[number % len(POSITION_KINDS)]
        positions = _positions(rng, kind, batch, seq)
        bits = _input(rng, shape, dtype)
        numpy_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        x = bits.view(numpy_dtype)
        base = float(rng.choice([10000.0, 500000.0, 1e6]))
        y = anyrope.rotate(
            x,
            positions,
            rotary_dim=rotary_dim,
            base=base,
            interleaved=interleaved,
            layout=layout,
            impl="array_api",
        )
        name = f"case{number:03d}"
        arrays[f"{name}_x"] = bits
        arrays[f"{name}_y"] = np.ascontiguousarray(y).view(BITS[dtype])
        if isinstance(positions, np.ndarray):
            arrays[f"{name}_positions"] = positions
        cases.append(
            {
                "name": name,
                "dtype": dtype,
                "interleaved": interleaved,
                "layout": layout,
                "rotary_dim": rotary_dim,
                "head_dim": head_dim,
                "base": base,
                "shape": list(shape),
                "positions": positions if not isinstance(positions, np.ndarray) else "array",
            }
        )
    np.savez_compressed(HERE / "golden.npz", **arrays)
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {HERE}")


if __name__ == "__main__":
    main()
