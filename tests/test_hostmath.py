"""The host math behind every bit: accuracy against mpmath, exact identities, and the rule
that nothing on a path that feeds bits calls a platform's transcendental functions.

numerical-contract.rst, "Host math that no machine can change": frequencies, scaling factors and
cos/sin tables are the same bits on every machine and within one ulp of the correctly rounded
float64 value.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope import _hostmath as hostmath
from anyrope import _hostmath_constants as constants

SAMPLES = 100_000
SOURCE = Path(anyrope.__file__).parent


def _ulps(got: np.ndarray, exact: list[mpmath.mpf]) -> np.ndarray:
    """``|got - exact|`` in ulps of the float64 nearest to ``exact``."""
    return np.array(
        [
            float(abs(mpmath.mpf(float(value)) - reference)) / np.spacing(abs(float(reference)))
            for value, reference in zip(got.reshape(-1), exact, strict=True)
        ]
    )


def _assert_accurate(errors: np.ndarray) -> None:
    """Within one ulp everywhere, and the correctly rounded value almost always."""
    assert errors.max() <= 1.0, errors.max()
    assert np.mean(errors <= 0.5) >= 0.995, np.mean(errors <= 0.5)


@pytest.fixture(scope="module")
def sampled() -> dict[str, np.ndarray]:
    """1e5 (position, base, width, pair) draws: positions below 2**31, bases 1e4 to 1e7."""
    rng = np.random.default_rng(11)
    rotary = rng.choice([64, 96, 128, 256], size=SAMPLES)
    pair = rng.integers(0, rotary // 2)
    base = 10.0 ** rng.uniform(4, 7, size=SAMPLES)
    theta = hostmath.power(base, -2 * pair, rotary)
    positions = rng.integers(0, 2**31, size=SAMPLES)
    return {"rotary": rotary, "pair": pair, "base": base, "theta": theta, "positions": positions}


def test_inv_freq_within_one_ulp(sampled: dict[str, np.ndarray]) -> None:
    with mpmath.workprec(120):
        exact = [
            mpmath.power(mpmath.mpf(float(b)), mpmath.mpf(-2 * int(i)) / int(r))
            for b, i, r in zip(sampled["base"], sampled["pair"], sampled["rotary"], strict=True)
        ]
    _assert_accurate(_ulps(sampled["theta"], exact))


@pytest.mark.parametrize("function", ["cos", "sin"])
def test_tables_within_one_ulp(sampled: dict[str, np.ndarray], function: str) -> None:
    """Table entries of ``fl(m * theta)``, the angle of numerical-contract.rst, "How every path
    computes" 2."""
    angles = sampled["positions"].astype(np.float64) * sampled["theta"]
    sin, cos = hostmath.sincos(angles)
    reference = getattr(mpmath, function)
    with mpmath.workprec(120):
        exact = [reference(mpmath.mpf(float(a))) for a in angles]
    _assert_accurate(_ulps(cos if function == "cos" else sin, exact))


def test_the_library_tables_are_the_host_math() -> None:
    rope = anyrope.RoPE(128, base=500000.0)
    positions = np.array([0, 1, 4095, 2**31 - 1, 2**53 - 1], dtype=np.int64)
    cos, sin = rope.tables(positions, dtype=np.float64)
    exact_sin, exact_cos = hostmath.sincos(positions.astype(np.float64)[:, None] * rope.inv_freq)
    np.testing.assert_array_equal(cos, exact_cos)
    np.testing.assert_array_equal(sin, exact_sin)
    np.testing.assert_array_equal(
        rope.inv_freq, hostmath.power(500000.0, -np.arange(0, 128, 2), 128)
    )


def _hard_angles() -> np.ndarray:
    """Angles next to multiples of pi/2 (heavy cancellation), tiny and huge angles."""
    rng = np.random.default_rng(5)
    with mpmath.workprec(200):
        half_pi = mpmath.pi / 2
        near = [float(int(k) * half_pi) for k in rng.integers(1, 2**32, size=400)]
    worst_double = 6381956970095103.0 * 2.0**797  # |x mod pi/2| about 2**-61 (Muller)
    tiny = rng.uniform(-1, 1, size=300) * 2.0 ** rng.integers(-80, 0, size=300)
    huge = rng.uniform(0.5, 1, size=300) * 2.0 ** rng.integers(33, 1000, size=300)
    edges = [worst_double, 1.5707963267948966, 2.0**33, -(2.0**33)]
    return np.concatenate([near, edges, tiny, huge])


@pytest.mark.parametrize("function", ["cos", "sin"])
def test_hard_angles_within_one_ulp(function: str) -> None:
    angles = _hard_angles()
    sin, cos = hostmath.sincos(angles)
    reference = getattr(mpmath, function)
    with mpmath.workprec(400):
        exact = [reference(mpmath.mpf(float(a))) for a in angles]
    errors = _ulps(cos if function == "cos" else sin, exact)
    assert errors.max() <= 1.0, (errors.max(), angles[np.argmax(errors)])


def _reduce_with_fractions(x: float) -> tuple[int, float, float]:
    """The far-angle reduction as anyrope computed it up to 0.x, with Fractions: the
    reference whose bits the integer reduction must give (issue 23, item 8)."""
    exact = Fraction(x)
    bits = max(0, exact.numerator.bit_length() - exact.denominator.bit_length()) + 200
    half_pi = constants.pi(bits) / 2
    k = round(exact / half_pi)
    r = exact - k * half_pi
    rh = float(r)
    return k % 4, rh, float(r - Fraction(rh))


def _far_angles(count: int) -> np.ndarray:
    """Angles at and past 2**33: table angles (position times frequency) below 2**53,
    next to multiples of pi/2, every binade up to the largest float64, both signs."""
    rng = np.random.default_rng(81)
    positions = rng.integers(2**33, 2**53, count)
    inv_freq = hostmath.power(10000.0, -np.arange(0, 128, 2), 128)
    table = positions * inv_freq[rng.integers(0, 64, count)]
    with mpmath.workprec(200):
        near = [float(int(k) * mpmath.pi / 2) for k in rng.integers(2**33, 2**62, count // 8)]
    binades = rng.uniform(1, 2, count) * 2.0 ** rng.integers(33, 1024, count)
    angles = np.concatenate([table[table >= 2.0**33], near, binades, [2.0**33, 2.0**53 - 1]])
    angles = np.concatenate([angles, np.nextafter(angles[: count // 4], np.inf)])
    return np.where(rng.random(angles.size) < 0.5, -angles, angles)


def test_far_reduction_gives_the_bits_of_the_fractions_reduction() -> None:
    """Issue 23, item 8: angles past 2**33 (decoding far from position 0) were reduced
    with Fractions, 17 to 50 us an angle. Integers give the same k mod 4, rh and rl."""
    for x in _far_angles(6_000).tolist():
        assert hostmath._reduce_exact(x) == _reduce_with_fractions(x), x


def test_log_within_one_ulp() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [10.0 ** rng.uniform(-300, 300, size=3000), rng.uniform(0.5, 2.0, size=3000)]
    )
    with mpmath.workprec(120):
        exact = [mpmath.log(mpmath.mpf(float(v))) for v in values]
    nonzero = np.array([e != 0 for e in exact])
    _assert_accurate(_ulps(hostmath.log(values)[nonzero], [e for e in exact if e != 0]))


def test_power_within_one_ulp() -> None:
    rng = np.random.default_rng(4)
    base = 10.0 ** rng.uniform(-3, 8, size=5000)
    numerator = rng.integers(-500, 500, size=5000)
    denominator = rng.integers(1, 300, size=5000)
    # Results in the normal float64 range.
    normal = np.abs(numerator / denominator * np.log10(base)) < 300
    base, numerator, denominator = base[normal], numerator[normal], denominator[normal]
    with mpmath.workprec(120):
        exact = [
            mpmath.power(mpmath.mpf(float(b)), mpmath.mpf(int(n)) / int(d))
            for b, n, d in zip(base, numerator, denominator, strict=True)
        ]
    _assert_accurate(_ulps(hostmath.power(base, numerator, denominator), exact))


def test_exact_cases_are_exact() -> None:
    assert hostmath.power(4.0, 2, 1) == 16.0
    assert hostmath.power(2.0, -1, 1) == 0.5
    assert hostmath.power(10000.0, -1, 2) == 0.01
    assert hostmath.power(123.4, 0, 7) == 1.0
    assert hostmath.log(1.0) == 0.0
    with mpmath.workprec(200):
        assert hostmath.log(2.0**-1000) == float(-1000 * mpmath.log(2))
    sin, cos = hostmath.sincos(np.zeros(3))
    assert sin.tolist() == [0.0, 0.0, 0.0]
    assert cos.tolist() == [1.0, 1.0, 1.0]


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_sin_is_odd_and_cos_even_bit_for_bit(x: float) -> None:
    (s, minus_s), (c, minus_c) = hostmath.sincos(np.array([x, -x]))
    assert np.float64(-s).tobytes() == np.float64(minus_s).tobytes() or s == minus_s == 0.0
    assert c == minus_c


def _bits(*arrays: np.ndarray) -> list[bytes]:
    return [np.ascontiguousarray(a, dtype=np.float64).tobytes() for a in arrays]


def _block_cases() -> list[tuple[str, tuple]]:
    """sincos, log and power on arguments that take every path: angles below 2**26, up
    to 2**33 and beyond (one by one with rationals), +-0 and subnormals; exponents whose
    halves are not an integer and +0, and results that overflow or underflow."""
    rng = np.random.default_rng(8)
    angles = np.concatenate(
        [
            rng.uniform(-(2.0**26), 2.0**26, 60),
            rng.uniform(-(2.0**33), 2.0**33, 40),
            [0.0, -0.0, 5e-324, -1e-310, 1e300, -3e40, 2.0**33],
            rng.uniform(-1, 1, 30) * 2.0 ** rng.integers(-1074, 0, 30),
        ]
    )
    rng.shuffle(angles)
    base = 10.0 ** rng.uniform(-3, 7, 40)
    return [
        ("sincos", (angles[:90],)),
        ("sincos", (angles.reshape(-1, 1) * np.array([1.0, 0.5]),)),
        ("sincos", (angles[np.abs(angles) < 2.0**26],)),
        ("log", (np.concatenate([base, [5e-324, 1.0, 1.7976931348623157e308]]),)),
        ("power", (base[:, None], -np.arange(0, 64, 2), 64)),
        ("power", (base[:8], rng.integers(-(2**39), 2**39, (5, 1)), 2**35 + 7)),
        ("power", (np.array([1e-300, 2.0, 1e300, 7.0]), np.array([[5], [-5], [1200]]), 3)),
        ("power", (2.0, np.arange(-1022490, -1021500, 7), 1000)),  # subnormal results
        ("power", (123.0, -3, 7)),
    ]


def test_blocks_give_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Elements are computed the same in any block."""
    cases = _block_cases()
    with np.errstate(over="ignore", under="ignore"):
        expected = [_bits(*np.broadcast_arrays(*_results(name, args))) for name, args in cases]
    monkeypatch.setattr(hostmath, "_BLOCK", 7)
    with np.errstate(over="ignore", under="ignore"):
        for (name, args), bits in zip(cases, expected, strict=True):
            assert _bits(*np.broadcast_arrays(*_results(name, args))) == bits, name


def _compiled_cases() -> list[tuple[str, tuple]]:
    rng = np.random.default_rng(23)
    n = 200_000
    sign = rng.choice([-1.0, 1.0], n)
    quarter = np.pi / 2 * rng.integers(-(2**32), 2**32, n)
    lengths = np.arange(4097, 4097 + 512)
    frequencies = hostmath.power(
        10000.0 * (lengths / 2048.0 - 1.0)[:, None], -np.arange(0, 128, 2), 128
    )
    return [
        ("sincos", (sign * 2.0 ** rng.uniform(-1074, 33, n),)),
        ("sincos", (rng.uniform(-(2.0**33), 2.0**33, n),)),
        ("sincos", (np.nextafter(quarter, quarter + sign * np.inf),)),  # next to k pi/2
        ("sincos", (np.array([0.0, -0.0, 5e-324, -5e-324, 2.0**33 - 1, 1.0] * 400),)),
        ("sincos", ((lengths - 1.0)[:, None] * frequencies,)),  # dynamic NTK rows
        ("power", (2.0 ** rng.uniform(-1074, 1024, n), rng.integers(-256, 257, n), 128)),
        ("power", (10.0 ** rng.uniform(-3, 7, (400, 1)), -np.arange(0, 256, 2), 256)),
        ("power", (rng.uniform(1.0, 1.0001, n), rng.integers(-(2**39), 2**39, n), 2**35 + 7)),
        ("power", (2.0, np.arange(-1_100_000, -1_000_000, 7), 1000)),  # subnormal, zero
        ("power", (3.0, np.arange(640_000, 660_000, 3), 1000)),  # up to overflow
    ]


def test_compiled_host_math_gives_the_numpy_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """With numba installed, large arrays go through anyrope._hostmath_numba: it must give
    every element the bits of the NumPy code."""
    pytest.importorskip("numba")
    assert hostmath._compiled() is not None
    cases = _compiled_cases()
    with np.errstate(over="ignore", under="ignore"):
        compiled = [_bits(*np.broadcast_arrays(*_results(name, args))) for name, args in cases]
        monkeypatch.setattr(hostmath, "_compiled", lambda: None)
        for (name, args), bits in zip(cases, compiled, strict=True):
            assert _bits(*np.broadcast_arrays(*_results(name, args))) == bits, (name, args)


def _results(name: str, args: tuple) -> tuple:
    result = getattr(hostmath, name)(*args)
    return result if isinstance(result, tuple) else (result,)


def test_non_finite_input_is_an_error() -> None:
    for bad in (np.inf, -np.inf, np.nan):
        with pytest.raises(ValueError, match="finite"):
            hostmath.sincos(np.array([1.0, bad]))
    with pytest.raises(ValueError, match="positive"):
        hostmath.log(np.array([0.0]))
    with pytest.raises(ValueError, match="positive"):
        hostmath.power(-2.0, 1, 2)


def test_constants_are_right() -> None:
    with mpmath.workprec(400):
        half_pi = sum(mpmath.mpf(part) for part in constants.PIO2)
        assert abs(half_pi - mpmath.pi / 2) < mpmath.mpf(2) ** -210
        ln2 = mpmath.mpf(constants.LN2_HI) + mpmath.mpf(constants.LN2_LO)
        assert abs(ln2 - mpmath.log(2)) < mpmath.mpf(2) ** -95
        assert float(2 / mpmath.pi) == constants.TWO_OVER_PI
        assert float(1 / mpmath.log(2)) == constants.INV_LN2
    # e * LN2_HI is exact for every float64 exponent: 42 significant bits at most.
    assert Fraction(constants.LN2_HI).denominator <= 2**42


_TABLE_SCRIPT = """
import hashlib, numpy as np, anyrope
rope = anyrope.RoPE(128, base=10000.0, scaling={"rope_type": "yarn", "factor": 4.0},
                    max_position_embeddings=65536)
cos, sin = rope.tables(np.arange(0, 2**31, 2**31 // 4099, dtype=np.int64), dtype=np.float64)
digest = hashlib.sha256()
for part in (rope.inv_freq, cos, sin):
    digest.update(np.ascontiguousarray(part).tobytes())
print(digest.hexdigest())
"""


def _dispatched_features() -> list[str]:
    """NumPy's SIMD features beyond its baseline that this CPU has."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
    return [name for name in umath.__cpu_dispatch__ if umath.__cpu_features__.get(name)]


def test_same_bits_with_numpys_simd_dispatch_switched_off() -> None:
    """A process where NumPy runs at its baseline SIMD level computes the same tables."""
    here = subprocess.run(
        [sys.executable, "-c", _TABLE_SCRIPT], capture_output=True, text=True, check=True
    ).stdout
    features = " ".join(_dispatched_features())
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": features}
    baseline = subprocess.run(
        [sys.executable, "-c", _TABLE_SCRIPT], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert here == baseline
    expected = hashlib.sha256()
    rope = anyrope.RoPE(
        128,
        base=10000.0,
        scaling={"rope_type": "yarn", "factor": 4.0},
        max_position_embeddings=65536,
    )
    cos, sin = rope.tables(np.arange(0, 2**31, 2**31 // 4099, dtype=np.int64), dtype=np.float64)
    for part in (rope.inv_freq, cos, sin):
        expected.update(np.ascontiguousarray(part).tobytes())
    assert here.strip() == expected.hexdigest()


# Modules whose results are not anyrope's bits: accuracy measurement, the float64 oracle
# of the check command, benchmark baselines, plots, and the softmax of the attention
# helpers (computed by the caller's library on its device).
_NOT_ON_A_BITS_PATH = {
    "_benchmark.py",
    "attention.py",
    "linear_attention.py",
    "check.py",
}
_PLATFORM_FUNCTIONS = {
    "cos",
    "sin",
    "tan",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "power",
    "pow",
    "float_power",
    "arctan",
    "arctan2",
    "atan",
    "atan2",
    "tanh",
    "sinh",
    "cosh",
    "hypot",
}


def _platform_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("np", "numpy", "math", "cmath")
            and node.attr in _PLATFORM_FUNCTIONS
        ):
            found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            # Only integer powers of integer literals (2**53) are exact everywhere.
            left = node.left
            if not (isinstance(left, ast.Constant) and type(left.value) is int):
                found.append(f"{path.name}:{node.lineno} ** of {ast.unparse(left)}")
    return found


# Named, never called: torch.export (non-strict) replaces math.pow while it traces, and
# _torch_op puts the original back while it builds tables (numba's typing needs it).
_RESTORED_NOT_CALLED = {("_torch_op.py", "math.pow")}


def test_no_platform_transcendentals_on_a_bits_path() -> None:
    modules = [p for p in sorted(SOURCE.rglob("*.py")) if p.name not in _NOT_ON_A_BITS_PATH]
    assert len(modules) > 20
    found = [call for path in modules for call in _platform_calls(path)]
    found = [f for f in found if (f.split(":")[0], f.split()[-1]) not in _RESTORED_NOT_CALLED]
    assert found == []
    for name, function in _RESTORED_NOT_CALLED:
        tree = ast.parse((SOURCE / name).read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert not [c for c in calls if ast.unparse(c.func) == function], (name, function)


def test_the_rule_finds_what_it_forbids(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np, math\na = np.cos(1.0) + math.log(2.0)\nb = a ** 0.5\n")
    assert len(_platform_calls(bad)) == 3
