"""``anyrope.check``: the shipped reference bits, the inputs, and the extra backends."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import anyrope
from anyrope._paths import numba_cpu
from anyrope.tools import _cli, check
from anyrope.tools._backends import DTYPES, extra_backends, known_backends
from subprocess_run import run_python

NUMPY_ONLY = known_backends()[:1]


def _row_keys(rows):
    return [(r.backend, r.dtype, r.pairing) for r in rows]


def test_shipped_reference_is_what_numpy_computes_now():
    # Fails whenever a change moves any output bit: regenerate only on purpose.
    assert check.compute_reference() == check.load_reference()


def test_reference_file_is_package_data():
    path = Path(anyrope.__file__).with_name(check.REFERENCE_FILE)
    assert json.loads(path.read_text()) == check.load_reference()


def test_anyrope_check_is_the_public_name_of_the_tool():
    import anyrope.check

    assert anyrope.check.__all__
    for name in anyrope.check.__all__:
        assert getattr(anyrope.check, name) is getattr(check, name), name


def test_write_reference_entry_point(tmp_path):
    path = tmp_path / "reference.json"
    result = run_python("-m", "anyrope.check", "--write-reference", str(path))
    assert result.returncode == 0, result.stderr
    assert json.loads(path.read_text()) == check.load_reference()


@pytest.mark.parametrize("dtype", DTYPES)
def test_inputs_hold_special_values_and_huge_positions(dtype):
    bits, positions = check.make_inputs(dtype)
    exponent_bits, significand_bits, unsigned = check._FORMATS[dtype]
    assert bits.dtype == unsigned
    assert bits.shape == check.SHAPE
    sign = unsigned(1 << (exponent_bits + significand_bits))
    exponent = bits & unsigned(((1 << exponent_bits) - 1) << significand_bits)
    significand = bits & unsigned((1 << significand_bits) - 1)
    top = unsigned(((1 << exponent_bits) - 1) << significand_bits)
    assert (bits == 0).any(), "+0"
    assert (bits == sign).any(), "-0"
    assert (bits == top).any(), "+inf"
    assert (bits == (top | sign)).any(), "-inf"
    assert ((exponent == top) & (significand != 0)).sum() >= 2, "NaN"
    subnormal = (exponent == 0) & (significand != 0)
    assert (subnormal & ((bits & sign) == 0)).any(), "positive subnormals"
    assert (subnormal & ((bits & sign) != 0)).any(), "negative subnormals"
    ordinary = (exponent != 0) & (exponent != top)
    assert ordinary.mean() > 0.9
    assert positions.dtype == np.int64
    assert positions.shape == check.SHAPE[:2]
    assert {0, 1, 2**31 - 1, 2**53 - 1} <= set(positions.ravel().tolist())
    assert (positions < 2**20).sum() >= 5, "small positions as well as huge ones"


def test_inputs_are_the_same_on_every_call():
    first, again = check.make_inputs("float32"), check.make_inputs("float32")
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])


def test_make_inputs_names_a_bad_dtype():
    with pytest.raises(ValueError, match="`dtype` must be one of float16, bfloat16"):
        check.make_inputs("int8")


@pytest.mark.parametrize("dtype", DTYPES)
def test_canonical_digest_ignores_nan_payloads_only(dtype):
    exponent_bits, significand_bits, unsigned = check._FORMATS[dtype]
    top = ((1 << exponent_bits) - 1) << significand_bits
    sign = 1 << (exponent_bits + significand_bits)
    quiet = 1 << (significand_bits - 1)
    base = np.array([top | quiet, 1, 0, top], dtype=unsigned)
    digest = check.canonical_digest(base, dtype)
    other_nans = base.copy()
    other_nans[0] = sign | top | quiet | 1
    assert check.canonical_digest(other_nans, dtype) == digest
    for index, flipped in ((1, 3), (2, sign), (3, top | sign)):
        changed = base.copy()
        changed[index] = flipped
        assert check.canonical_digest(changed, dtype) != digest, (index, flipped)


def test_numpy_rows_match_the_reference():
    rows = check.run_check(backends=NUMPY_ONLY)
    dtypes = NUMPY_ONLY[0].dtype_names
    assert _row_keys(rows) == [("numpy", d, p) for d in dtypes for p in check.PAIRINGS]
    assert all(r.ok and r.same_as_reference and r.same_as_numpy for r in rows), rows
    assert {r.path for r in rows} == {"numba" if numba_cpu.installed() else "blocked"}
    half = [r.max_ulp for r in rows if r.dtype in ("float16", "bfloat16")]
    assert 0.4 < max(half) <= check.HALF_BOUND


def test_every_usable_backend_has_a_row_per_dtype_and_pairing():
    usable = check.checked_backends()
    rows = check.run_check()
    expected = {(b.name, d, p) for b in usable for d in b.dtype_names for p in check.PAIRINGS}
    assert set(_row_keys(rows)) == expected
    assert len(rows) == len(expected)


def _tampered(key):
    reference = copy.deepcopy(check.load_reference())
    reference["outputs"][key] = "0" * 64
    return reference


def test_a_tampered_digest_fails_its_rows_only():
    rows = check.run_check(_tampered("float32 interleaved"), backends=NUMPY_ONLY)
    failed = [(r.dtype, r.pairing) for r in rows if not r.ok]
    assert failed == [("float32", "interleaved")]
    (row,) = (r for r in rows if not r.ok)
    assert not row.same_as_reference
    assert row.same_as_numpy
    assert row.same_inputs


def test_a_tampered_reference_makes_check_exit_1(monkeypatch, capsys):
    tampered = _tampered("float64 half-split")
    monkeypatch.setattr(check, "load_reference", lambda: tampered)
    assert _cli.main(["check"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.err
    assert "differ from the shipped reference" in captured.err
    (fields,) = (
        line.split()
        for line in captured.out.splitlines()
        if line.startswith("numpy ") and " float64 " in line and "half-split" in line
    )
    assert fields[5:7] == ["NO", "yes"]
    assert fields[-1] == "FAIL"


def test_a_reference_for_other_inputs_says_so():
    reference = copy.deepcopy(check.load_reference())
    reference["inputs"]["float16"] = "0" * 64
    rows = check.run_check(reference, backends=NUMPY_ONLY)
    assert [r.ok for r in rows if r.dtype == "float16"] == [False, False]
    assert all(r.ok for r in rows if r.dtype != "float16")
    assert "NO (inputs)" in check.format_rows(rows)


def test_a_reference_for_other_parameters_is_refused():
    reference = copy.deepcopy(check.load_reference())
    reference["rotary_dim"] = 64
    with pytest.raises(ValueError, match=r"rotary_dim=64.*regenerate it with"):
        check.run_check(reference, backends=NUMPY_ONLY)


def test_format_rows_header_and_marks():
    rows = [
        check.Row("numpy", "cpu", "float16", "half-split", "blocked", True, True, True, 0.5),
        check.Row("jax", "cpu", "float32", "interleaved", "array_api", True, False, False, 9.0),
    ]
    lines = check.format_rows(rows).splitlines()
    assert lines[0].split() == [
        "backend",
        "device",
        "dtype",
        "pairing",
        "path",
        "reference",
        "numpy",
        "max",
        "ulp",
        "status",
    ]
    assert lines[1].split()[-4:] == ["yes", "yes", "0.500", "ok"]
    assert lines[2].split()[-4:] == ["NO", "NO", "9.000", "FAIL"]


def test_half_types_over_the_bound_fail():
    row = check.Row("torch", "cpu", "bfloat16", "half-split", "blocked", True, True, True, 0.52)
    assert not row.ok
    assert check.Row("torch", "cpu", "float32", "half-split", "blocked", True, True, True, 1.6).ok


def test_jax_and_dask_stay_out_of_the_test_matrix():
    matrix = {b.name for b in known_backends()}
    assert {b.name for b in extra_backends()} == {"jax", "dask"}
    assert not matrix & {"jax", "dask"}


@pytest.mark.parametrize(("library", "reason"), [("jax", "JAX"), ("dask", "dask")])
def test_a_missing_library_is_listed_as_not_checked(library, reason):
    installed = importlib.util.find_spec(library) is not None
    checked = {b.name for b in check.checked_backends()}
    missing = dict(check.unavailable_backends())
    assert (library in checked) == installed
    assert (f"{library}-cpu" in missing) == (not installed)
    if not installed:
        assert missing[f"{library}-cpu"] == f"{reason} is not installed"


def test_importing_anyrope_imports_neither_jax_nor_dask():
    code = (
        "import sys, anyrope, anyrope.check, anyrope.tools._backends; "
        "print(sorted(m for m in ('jax', 'dask') if m in sys.modules))"
    )
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _extra(name):
    (found,) = (b for b in extra_backends() if b.name == name)
    return found


@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_rows_match_the_reference(dtype):
    pytest.importorskip("jax", reason="JAX is not installed")
    rows = [r for r in check.run_check(backends=[_extra("jax")]) if r.dtype == dtype]
    assert [r.pairing for r in rows] == list(check.PAIRINGS)
    assert all(r.ok for r in rows), rows


def test_jax_rows_cover_every_dtype_and_leave_x64_off():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    before = jax.config.read("jax_enable_x64")
    rows = check.run_check(backends=[_extra("jax")])
    assert jax.config.read("jax_enable_x64") == before
    assert _row_keys(rows) == [("jax", d, p) for d in DTYPES for p in check.PAIRINGS]
    # Without 64-bit types the positions near 2**53 would wrap and every row would differ.
    assert all(r.same_as_reference for r in rows if r.dtype == "float16")


def test_dask_rows_match_the_reference_in_chunks():
    pytest.importorskip("dask.array", reason="dask is not installed")
    dask_backend = _extra("dask")
    bits, _ = check.make_inputs("float32")
    assert dask_backend.from_bits(bits, "float32").numblocks == (2, 2, 1, 1)
    rows = check.run_check(backends=[dask_backend])
    assert _row_keys(rows) == [
        ("dask", d, p) for d in dask_backend.dtype_names for p in check.PAIRINGS
    ]
    assert all(r.ok for r in rows), rows
    cpu_path = "numba" if numba_cpu.installed() else "blocked"
    assert {r.path for r in rows} == {f"{cpu_path} per chunk"}
