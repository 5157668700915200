"""Regenerate the golden files: ``python tests/golden/generate.py``.

Three kinds of golden data, all stored as raw bits (bfloat16 and float16 payloads survive):

- ``cases.json`` + ``golden.npz``: rotations. Random inputs over every dtype, pairing,
  axis layout and partial width; special values (subnormal inputs and outputs, signed
  zeros, infinities, NaN, overflow); positions up to ``2**53 - 1``; scaled RoPEs, with
  factors and lengths that are not powers of two too; dynamic NTK decoding steps; M-RoPE
  with three distinct position streams, contiguous and interleaved.
- ``tables.json`` + ``golden.npz``: ``inv_freq``, attention factor, softmax scale and the
  float64 and float32 cos/sin tables of every scaling method, at positions up to
  ``2**53 - 1``.

Every test session compares its results with these bits exactly (NaN: at the same
places), on every machine; ``tests/test_golden.py`` also checks the tables against mpmath,
so the files are right and not only self-consistent. Needs ml_dtypes for bfloat16.
Regenerating is only needed when a case is added, at the end of its list (a new rotation
case draws from the random generator after all the others): the script refuses to
write if any entry already in the files would change its bits. The bits must not depend
on where this script runs, and the tests prove that they do not.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import anyrope
from anyrope.tools._backends import float32_to_bfloat16_bits

HERE = Path(__file__).parent
DTYPES = ("float16", "bfloat16", "float32", "float64")
BITS = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32, "float64": np.uint64}
HEAD_DIMS = (64, 80, 96, 128, 256)
POSITION_KINDS = ("default", "offset", "random")
LARGEST_POSITION = 2**53 - 1


def _native(dtype: str) -> Any:
    return ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)


def _to_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded once to ``dtype``, as bits."""
    if dtype == "bfloat16":
        return values.astype(ml_dtypes.bfloat16).view(np.uint16)
    return values.astype(dtype).view(BITS[dtype])


def _input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    values = rng.standard_normal(shape) * rng.choice([0.01, 1.0, 300.0], size=shape)
    if dtype == "float64":
        return values.view(np.uint64)
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(values.astype(np.float32))
    return values.astype(dtype).view(BITS[dtype])


def _special_input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Subnormals, values whose rotation is subnormal, signed zeros, inf, NaN, huge values."""
    info = ml_dtypes.finfo(_native(dtype))
    tiny, smallest = float(info.smallest_normal), float(info.smallest_subnormal)
    largest = float(info.max)
    pool = np.array(
        [
            smallest,
            -smallest,
            3 * smallest,
            tiny / 2,
            -tiny / 3,
            tiny * 0.999,
            tiny,
            -tiny,
            1.5 * tiny,
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            largest,
            -largest,
            largest / 2,
            1.0,
            -0.75,
        ]
    )
    values = rng.choice(pool, size=shape)
    # A few ordinary values between the special ones, so pairs mix both.
    ordinary = rng.standard_normal(shape)
    values = np.where(rng.random(shape) < 0.25, ordinary, values)
    with np.errstate(over="ignore"):
        return _to_bits(values, dtype)


def _positions(rng: np.random.Generator, kind: str, batch: int, seq: int) -> object:
    if kind == "default":
        return None
    if kind == "offset":
        return int(rng.integers(1, 5000))
    return rng.integers(0, 2**20, size=(batch, seq), dtype=np.int64)


def _rotation_cases(rng: np.random.Generator) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}

    def add(
        kind: str,
        dtype: str,
        bits: np.ndarray,
        positions: object,
        *,
        interleaved: bool,
        layout: str,
        rotary_dim: int,
        base: float,
        **rope: Any,
    ) -> None:
        name = f"case{len(cases):03d}"
        x = bits.view(_native(dtype))
        options = {
            "rotary_dim": rotary_dim,
            "base": base,
            "interleaved": interleaved,
            "layout": layout,
        }
        with np.errstate(invalid="ignore", over="ignore"):
            y = anyrope.rotate(x, positions, **options, **rope, impl="array_api")
        arrays[f"{name}_x"] = bits
        arrays[f"{name}_y"] = np.ascontiguousarray(y).view(BITS[dtype])
        if isinstance(positions, np.ndarray):
            arrays[f"{name}_positions"] = positions
        cases.append(
            {
                "name": name,
                "kind": kind,
                "dtype": dtype,
                "interleaved": interleaved,
                "layout": layout,
                "rotary_dim": rotary_dim,
                "head_dim": bits.shape[-1],
                "base": base,
                "shape": list(bits.shape),
                "positions": positions if not isinstance(positions, np.ndarray) else "array",
                **rope,
            }
        )

    # 1. Random inputs: every dtype x pairing x axis layout x full/partial width.
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
        base = float(rng.choice([10000.0, 500000.0, 1e6]))
        add(
            "random",
            dtype,
            bits,
            positions,
            interleaved=interleaved,
            layout=layout,
            rotary_dim=rotary_dim,
            base=base,
        )

    # 2. Special values, at position 0 (cos 1, sin 0: inf * 0) and beyond.
    for dtype, interleaved in itertools.product(DTYPES, (False, True)):
        shape = (2, 6, 3, 64)
        positions = rng.integers(0, 2**31, size=(2, 6), dtype=np.int64)
        positions[:, 0] = 0
        add(
            "special",
            dtype,
            _special_input(rng, shape, dtype),
            positions,
            interleaved=interleaved,
            layout="bshd",
            rotary_dim=48,
            base=10000.0,
        )

    # 3. Large positions: below 2**31 (long contexts) and up to 2**53 - 1, where the
    # angles need the exact argument reduction.
    for dtype, base in itertools.product(DTYPES, (1e4, 5e5, 1e7)):
        shape = (2, 4, 2, 128)
        positions = rng.integers(0, 2**31, size=(2, 4), dtype=np.int64)
        positions[1] = rng.integers(2**31, LARGEST_POSITION, size=4, dtype=np.int64)
        positions[1, -1] = LARGEST_POSITION
        add(
            "large",
            dtype,
            _input(rng, shape, dtype),
            positions,
            interleaved=base == 5e5,
            layout="bshd",
            rotary_dim=128,
            base=base,
        )

    # 4. Scaled RoPEs: the attention factor inside the tables.
    for dtype, scaling in itertools.product(("bfloat16", "float32", "float64"), _ROTATION_SCALINGS):
        shape = (1, 5, 2, 64)
        positions = rng.integers(0, 200_000, size=(1, 5), dtype=np.int64)
        add(
            "scaled",
            dtype,
            _input(rng, shape, dtype),
            positions,
            interleaved=False,
            layout="bshd",
            rotary_dim=64,
            base=1e6,
            scaling=scaling,
            max_position_embeddings=131072,
        )

    # 5. Scaled RoPEs whose factors and lengths are not powers of two, where dividing by
    # the factor and multiplying by its reciprocal, or (f * L) / L_max and f * (L / L_max),
    # give other bits; positions past each method's original context.
    for dtype, (_, kwargs, _lengths) in itertools.product(("float32", "float64"), ROTATION_ROPES):
        head_dim = kwargs["head_dim"]
        options = {key: value for key, value in kwargs.items() if key != "head_dim"}
        positions = rng.integers(0, 200_000, size=(2, 5), dtype=np.int64)
        add(
            "scaled",
            dtype,
            _input(rng, (2, 5, 2, head_dim), dtype),
            positions,
            interleaved=options.pop("interleaved", False),
            layout="bshd",
            rotary_dim=head_dim,
            base=options.pop("base", 10000.0),
            **options,
        )

    # 6. Dynamic NTK decoding past the context: one token at position L - 1, with the
    # frequencies of the length L, which a decoding step takes from a block of the
    # lengths that follow (the bits of each length alone, whichever came first).
    _, dynamic_rope, lengths = DYNAMIC_NPOT
    for dtype, length in itertools.product(("float32", "float64"), lengths[1:]):
        add(
            "decode",
            dtype,
            _input(rng, (1, 1, 4, dynamic_rope["head_dim"]), dtype),
            length - 1,
            interleaved=False,
            layout="bshd",
            rotary_dim=dynamic_rope["head_dim"],
            base=10000.0,
            scaling=dynamic_rope["scaling"],
            max_position_embeddings=dynamic_rope["max_position_embeddings"],
        )

    # 7. M-RoPE: three position streams (temporal, height, width) that all differ, the
    # streams' pairs in contiguous runs (Qwen2-VL) and in turn (Qwen3-VL).
    for dtype, scaling in itertools.product(DTYPES, MROPE_SCALINGS):
        add(
            "mrope",
            dtype,
            _input(rng, (2, 5, 2, 128), dtype),
            rng.integers(0, 2**20, size=(3, 2, 5), dtype=np.int64),
            interleaved=False,
            layout="bshd",
            rotary_dim=128,
            base=5e6,
            scaling=scaling,
        )
    return cases, arrays


MROPE_SCALINGS = (
    {"type": "mrope", "mrope_section": [16, 24, 24]},
    {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
)


_ROTATION_SCALINGS = (
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.05 * i for i in range(32)],
        "long_factor": [1.0 + 1.5 * i for i in range(32)],
        "original_max_position_embeddings": 4096,
    },
)

# (name, RoPE keyword arguments, sequence lengths for the length-dependent methods)
TABLE_ROPES: tuple[tuple[str, dict[str, Any], tuple[int | None, ...]], ...] = (
    ("default-1e4", {"head_dim": 128}, (None,)),
    ("default-5e5-r64", {"head_dim": 128, "rotary_dim": 64, "base": 500000.0}, (None,)),
    ("default-1e7", {"head_dim": 256, "base": 1e7}, (None,)),
    ("linear", {"head_dim": 128, "scaling": {"rope_type": "linear", "factor": 4.0}}, (None,)),
    ("ntk", {"head_dim": 128, "scaling": {"rope_type": "ntk", "factor": 4.0}}, (None,)),
    (
        "dynamic",
        {
            "head_dim": 128,
            "scaling": {"rope_type": "dynamic", "factor": 4.0},
            "max_position_embeddings": 4096,
        },
        (4096, 5000, 200_000),
    ),
    (
        "yarn",
        {
            "head_dim": 128,
            "base": 1e6,
            "scaling": {"rope_type": "yarn", "factor": 4.0},
            "max_position_embeddings": 32768,
        },
        (None,),
    ),
    (
        "yarn-no-truncate",
        {
            "head_dim": 64,
            "scaling": {
                "rope_type": "yarn",
                "factor": 16.0,
                "beta_fast": 16.0,
                "beta_slow": 2.0,
                "truncate": False,
                "attention_factor": 1.25,
                "original_max_position_embeddings": 2048,
            },
        },
        (None,),
    ),
    (
        "yarn-deepseek",
        {
            "head_dim": 64,
            "interleaved": True,
            "scaling": {
                "rope_type": "yarn",
                "factor": 40.0,
                "mscale": 1.0,
                "mscale_all_dim": 0.707,
                "beta_fast": 32,
                "beta_slow": 1,
                "original_max_position_embeddings": 4096,
            },
            "max_position_embeddings": 163840,
        },
        (None,),
    ),
    (
        "longrope",
        {
            "head_dim": 96,
            "scaling": {
                "rope_type": "longrope",
                "short_factor": [1.0 + 0.02 * i for i in range(48)],
                "long_factor": [1.0 + 1.7 * i for i in range(48)],
                "original_max_position_embeddings": 4096,
            },
            "max_position_embeddings": 131072,
        },
        (4096, 4097, 131072),
    ),
    (
        "llama3",
        {
            "head_dim": 128,
            "base": 500000.0,
            "scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "max_position_embeddings": 131072,
        },
        (None,),
    ),
    ("axial", {"head_dim": 64, "scaling": {"rope_type": "axial"}}, (None,)),
    (
        "axial-3d",
        {"head_dim": 96, "scaling": {"rope_type": "axial", "axial_sections": [16, 16, 16]}},
        (None,),
    ),
    (
        "proportional",
        {
            "head_dim": 128,
            "base": 1e6,
            "scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.25},
        },
        (None,),
    ),
)

# Factors and lengths that are not powers of two, for every scaling method: with a factor
# of 4 and lengths of 2**k most roundings are exact, and formulas written in another
# order give the same bits.
DYNAMIC_NPOT: tuple[str, dict[str, Any], tuple[int | None, ...]] = (
    "dynamic-3",
    {
        "head_dim": 128,
        "scaling": {"rope_type": "dynamic", "factor": 3.0},
        "max_position_embeddings": 40960,
    },
    (40960, 40961, 50001, 50002, 50100, 99999, 123457),
)

ROTATION_ROPES: tuple[tuple[str, dict[str, Any], tuple[int | None, ...]], ...] = (
    ("linear-3", {"head_dim": 128, "scaling": {"rope_type": "linear", "factor": 3.0}}, (None,)),
    ("ntk-3", {"head_dim": 96, "scaling": {"rope_type": "ntk", "factor": 3.0}}, (None,)),
    DYNAMIC_NPOT,
    (
        "yarn-3",
        {
            "head_dim": 128,
            "base": 1e6,
            "scaling": {
                "rope_type": "yarn",
                "factor": 3.0,
                "original_max_position_embeddings": 6000,
            },
            "max_position_embeddings": 18000,
        },
        (None,),
    ),
    (
        "yarn-mscale-5.5",
        {
            "head_dim": 96,
            "interleaved": True,
            "scaling": {
                "rope_type": "yarn",
                "factor": 5.5,
                "mscale": 1.1,
                "mscale_all_dim": 0.7,
                "beta_fast": 24.0,
                "beta_slow": 1.5,
                "truncate": False,
                "original_max_position_embeddings": 3000,
            },
        },
        (None,),
    ),
    (
        "longrope-3000",
        {
            "head_dim": 64,
            "scaling": {
                "rope_type": "longrope",
                "short_factor": [1.0 + 0.037 * i for i in range(32)],
                "long_factor": [1.3 + 2.71 * i for i in range(32)],
                "original_max_position_embeddings": 3000,
            },
            "max_position_embeddings": 100000,
        },
        (3000, 3001, 77777),
    ),
    (
        "llama3-3",
        {
            "head_dim": 128,
            "base": 500000.0,
            "scaling": {
                "rope_type": "llama3",
                "factor": 3.0,
                "low_freq_factor": 1.5,
                "high_freq_factor": 12.0,
                "original_max_position_embeddings": 24000,
            },
            "max_position_embeddings": 72000,
        },
        (None,),
    ),
    (
        "proportional-3",
        {
            "head_dim": 96,
            "base": 1e6,
            "scaling": {"rope_type": "proportional", "factor": 3.0, "partial_rotary_factor": 0.3},
        },
        (None,),
    ),
)

TABLE_ROPES += (
    *ROTATION_ROPES,
    (
        "axial-wan",
        {
            "head_dim": 128,
            "interleaved": True,
            "scaling": {"rope_type": "axial", "axial_sections": [22, 21, 21]},
        },
        (None,),
    ),
    *(
        (f"mrope-{label}", {"head_dim": 128, "base": 5e6, "scaling": scaling}, (None,))
        for label, scaling in zip(("contiguous", "interleaved"), MROPE_SCALINGS, strict=True)
    ),
)

TABLE_POSITIONS = (0, 1, 2, 3, 7, 100, 4095, 4096, 65535, 131071, 10**6 + 3, 2**31 - 1)
HUGE_POSITIONS = (2**40 + 5, LARGEST_POSITION)


def _table_positions(seq_len: int | None) -> np.ndarray:
    """Positions below ``seq_len`` (all of them, and 2**53 - 1, when it is None)."""
    if seq_len is None:
        return np.array(TABLE_POSITIONS + HUGE_POSITIONS, dtype=np.int64)
    kept = [p for p in TABLE_POSITIONS if p < seq_len - 1]
    return np.array([*kept, seq_len - 1], dtype=np.int64)


def _table_cases() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for label, kwargs, lengths in TABLE_ROPES:
        head_dim = kwargs["head_dim"]
        options = {key: value for key, value in kwargs.items() if key != "head_dim"}
        rope = anyrope.RoPE(head_dim, **options)
        for seq_len in lengths:
            name = f"table-{label}" + ("" if seq_len is None else f"-L{seq_len}")
            positions = _table_positions(seq_len)
            if rope.axial:
                # (row, column) of image patches; a third axis (video time) rolled by 3.
                coordinates = [positions, positions[::-1], np.roll(positions, 3)]
                assert rope.sections is not None
                positions = np.stack(coordinates[: len(rope.sections)], axis=-1)
            elif rope.sections is not None:
                # M-RoPE: (temporal, height, width) streams on the first axis.
                positions = np.stack([positions, positions[::-1], np.roll(positions, 3)])
            inv_freq, factor = rope.frequencies(int(positions.max()) + 1)
            arrays[f"{name}_positions"] = positions
            arrays[f"{name}_inv_freq"] = inv_freq.view(np.uint64)
            for dtype in (np.float64, np.float32):
                cos, sin = rope.tables(positions, dtype=dtype)
                key = np.dtype(dtype).name
                arrays[f"{name}_cos_{key}"] = cos.view(BITS[key])
                arrays[f"{name}_sin_{key}"] = sin.view(BITS[key])
            cases.append(
                {
                    "name": name,
                    "head_dim": head_dim,
                    "options": options,
                    "attention_factor": float(factor).hex(),
                    "softmax_scale": float(rope.softmax_scale).hex(),
                }
            )
    return cases, arrays


def _check_kept(cases: list[Any], tables: list[Any], arrays: dict[str, np.ndarray]) -> None:
    """Refuse to write unless every entry of the files already there keeps its bits: a
    case is added at the end of its list, never changed (a machine must not pass by
    regenerating)."""
    if not (HERE / "golden.npz").exists():
        return
    old = np.load(HERE / "golden.npz")
    changed = [
        key
        for key in old.files
        if key not in arrays
        or old[key].dtype != arrays[key].dtype
        or old[key].shape != arrays[key].shape
        or old[key].tobytes() != arrays[key].tobytes()
    ]
    for name, entries in (("cases.json", cases), ("tables.json", tables)):
        kept = json.loads((HERE / name).read_text())
        if entries[: len(kept)] != kept:
            changed.append(name)
    if changed:
        raise SystemExit(f"existing golden entries would change: {changed}")


def main() -> None:
    rng = np.random.default_rng(20261123)
    cases, arrays = _rotation_cases(rng)
    tables, table_arrays = _table_cases()
    _check_kept(cases, tables, {**arrays, **table_arrays})
    np.savez_compressed(HERE / "golden.npz", **arrays, **table_arrays)
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    (HERE / "tables.json").write_text(json.dumps(tables, indent=1) + "\n")
    print(f"wrote {len(cases)} rotation cases and {len(tables)} table cases to {HERE}")


if __name__ == "__main__":
    main()
