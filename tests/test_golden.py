"""Every backend and path reproduces the golden files bit for bit, on every machine.

The files were made once (``tests/golden/generate.py``) and are never regenerated to make
a machine pass: ``nox -s tests-dispatch`` runs this module once per NumPy SIMD level
the CPU offers, and CI runs it on whatever CPU it gets. The tables are also checked
against mpmath, so the golden bits are right and not only the same everywhere.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import mpmath
import numpy as np
import pytest

import anyrope
from anyrope._paths import PATHS
from anyrope.scaling import ROPE_TYPES
from goldens import CASES, DATA, TABLES, assert_same_bits, case_id, is_nan_bits, rotate_case

BITS = {"float32": np.uint32, "float64": np.uint64}


def _run(backend, case, impl):
    if case["dtype"] not in backend.dtype_names:
        pytest.skip(f"{backend.name} has no {case['dtype']}")
    x = backend.from_bits(DATA[f"{case['name']}_x"], case["dtype"])
    positions = case["positions"]
    if positions == "array":
        positions = backend.from_numpy(DATA[f"{case['name']}_positions"])
    try:
        y = rotate_case(case, x, positions, impl=impl)
    except ValueError as error:
        # The registry's refusal of a path by name ("`impl`='numba' needs numba, ..."):
        # the arrays are not the path's, or its library is missing.
        if str(error).startswith(f"`impl`={impl!r} "):
            pytest.skip(str(error))
        raise
    assert y.dtype == x.dtype
    assert tuple(y.shape) == tuple(case["shape"])
    return backend.to_bits(y)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("impl", ["auto", *PATHS])
def test_golden_bits(backend, case, impl, request):
    """Every path of the registry (``auto`` too) on every backend it takes."""
    if (backend.name, impl, case["kind"], case["dtype"]) == (
        "cupy",
        "array_api",
        "special",
        "float32",
    ):
        # The one documented exception (docs/numerical-contract.rst, "Not identical").
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="CuPy compiles its own elementwise kernels with -ftz=true "
                "(cupy/cupy#8382): its float32 arithmetic flushes subnormals",
            )
        )
    got = _run(backend, case, impl)
    assert_same_bits(got, DATA[f"{case['name']}_y"], case["dtype"])


def _table_rope(table: dict[str, Any]) -> anyrope.RoPE:
    return anyrope.RoPE(table["head_dim"], **table["options"])


@pytest.mark.parametrize("table", TABLES, ids=[t["name"] for t in TABLES])
def test_golden_tables(table):
    """inv_freq, attention factor, softmax scale and every float64 and float32 table entry."""
    name, rope = table["name"], _table_rope(table)
    positions = DATA[f"{name}_positions"]
    inv_freq, factor = rope.frequencies(int(positions.max()) + 1)
    np.testing.assert_array_equal(inv_freq.view(np.uint64), DATA[f"{name}_inv_freq"])
    assert factor.hex() == table["attention_factor"]
    assert float(rope.softmax_scale).hex() == table["softmax_scale"]
    for dtype in ("float64", "float32"):
        cos, sin = rope.tables(positions, dtype=np.dtype(dtype))
        np.testing.assert_array_equal(cos.view(BITS[dtype]), DATA[f"{name}_cos_{dtype}"])
        np.testing.assert_array_equal(sin.view(BITS[dtype]), DATA[f"{name}_sin_{dtype}"])


def _power_of_two(value: float) -> bool:
    return math.frexp(value)[0] == 0.5


@pytest.mark.parametrize("rope_type", ROPE_TYPES)
def test_every_scaling_method_has_tables_off_powers_of_two(rope_type: str) -> None:
    """With factors and lengths of 2**k most roundings are exact, and a formula evaluated
    in another order (``x * (1 / f)`` for ``x / f``) gives the same bits: each method
    needs golden tables with a factor, lengths and contexts that are not powers of two."""
    tables = [t for t in TABLES if _table_rope(t).scaling.rope_type == rope_type]
    assert tables, f"no golden table for rope_type={rope_type!r}"
    ropes = [_table_rope(t) for t in tables]
    if "factor" in type(ropes[0].scaling).keys:
        # LongRoPE without a factor takes L_max / L0.
        factors = [
            r.scaling.factor
            or (r.scaling.max_position_embeddings or 1)
            / (r.scaling.original_max_position_embeddings or 1)
            for r in ropes
        ]
        assert any(not _power_of_two(f) for f in factors), factors
    if ropes[0].scaling.depends_on_length:
        lengths = [int(DATA[f"{t['name']}_positions"].max()) + 1 for t in tables]
        assert any(not _power_of_two(n) for n in lengths)
        contexts = [
            r.scaling.original_max_position_embeddings or r.scaling.max_position_embeddings
            for r in ropes
        ]
        assert any(not _power_of_two(n) for n in contexts if n is not None)


def _ulps(got: np.ndarray, exact: list[Any]) -> np.ndarray:
    """|got - exact| in ulps of the float64 nearest to ``exact``."""
    errors = []
    for value, reference in zip(got.reshape(-1), exact, strict=True):
        nearest = float(reference)
        errors.append(float(abs(mpmath.mpf(float(value)) - reference)) / np.spacing(abs(nearest)))
    return np.array(errors)


def _mrope_stream_of_pair(scaling: Any) -> list[int]:
    """Contiguous runs of ``mrope_section`` pairs, or transformers' interleaving (Qwen3-VL:
    pair i follows stream i % 3 while i < 3 * mrope_section[i % 3], else stream 0)."""
    sections = list(scaling.mrope_section)
    if not scaling.mrope_interleaved:
        return [stream for stream, size in enumerate(sections) for _ in range(size)]
    owners = [pair % 3 for pair in range(sum(sections))]
    return [s if s and pair < 3 * sections[s] else 0 for pair, s in enumerate(owners)]


@pytest.mark.parametrize("table", TABLES, ids=[t["name"] for t in TABLES])
def test_golden_tables_are_within_one_ulp(table):
    """float64 entries within 1 ulp of ``cos(m * theta) * factor`` evaluated in mpmath.

    The angle is the float64 product ``m * theta`` (numerical-contract.rst, "How every path
    computes" 2); an attention factor other than 1 adds its own rounding, hence the 1.5 ulp.
    """
    name, rope = table["name"], _table_rope(table)
    positions = DATA[f"{name}_positions"]
    if rope.axial:  # each section of the pairs follows its own coordinate
        angles_positions = np.repeat(positions, rope.sections, axis=1)
    elif rope.sections is not None:  # M-RoPE: streams on the first axis
        angles_positions = positions[_mrope_stream_of_pair(rope.scaling)].T
    else:
        angles_positions = positions[:, None]
    inv_freq = DATA[f"{name}_inv_freq"].view(np.float64)
    angles = angles_positions.astype(np.float64) * inv_freq
    factor = mpmath.mpf(float.fromhex(table["attention_factor"]))
    bound = 1.0 if factor == 1 else 1.5
    with mpmath.workprec(200):
        for kind, function in (("cos", mpmath.cos), ("sin", mpmath.sin)):
            exact = [function(mpmath.mpf(float(a))) * factor for a in angles.reshape(-1)]
            got = DATA[f"{name}_{kind}_float64"].view(np.float64)
            nonzero = np.array([e != 0 for e in exact])
            errors = _ulps(got.reshape(-1)[nonzero], [e for e in exact if e != 0])
            assert errors.max() <= bound, (kind, errors.max())


def _has(bits: np.ndarray, dtype: str, predicate: str) -> bool:
    numpy = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    values = bits.view(numpy).astype(np.float64)
    tiny = float(ml_dtypes.finfo(numpy).smallest_normal)
    return bool(
        {
            "subnormal": np.any((values != 0) & (np.abs(values) < tiny)),
            "negative zero": np.any((values == 0) & np.signbit(values)),
            "inf": np.any(np.isinf(values)),
            "nan": np.any(is_nan_bits(bits, dtype)),
        }[predicate]
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_golden_files_hold_special_values(dtype):
    """The special cases really hold what they promise, in inputs and in outputs."""
    special = [c for c in CASES if c["kind"] == "special" and c["dtype"] == dtype]
    assert special
    for predicate in ("subnormal", "negative zero", "inf", "nan"):
        for side in ("x", "y"):
            assert any(_has(DATA[f"{c['name']}_{side}"], dtype, predicate) for c in special), (
                predicate,
                side,
            )
    large = [c for c in CASES if c["kind"] == "large" and c["dtype"] == dtype]
    assert max(int(DATA[f"{c['name']}_positions"].max()) for c in large) == 2**53 - 1
