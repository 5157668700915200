"""``python -m anyrope check``: the same bits on every installed backend and machine.

For every backend installed here (NumPy always; PyTorch on the CPU; PyTorch CUDA, CuPy,
array-api-strict, JAX and dask where present), every dtype it has and both pairings,
anyrope rotates the same inputs and the result is compared with

- the reference bits shipped in the package (``_reference_bits.json``: SHA-256 digests
  of NumPy's results on the machine that wrote it), so a match proves the same bits as
  on that machine and on every machine that passes the check,
- the NumPy result on this machine, bit for bit (for bfloat16 without ml_dtypes: NumPy's
  float32 result rounded to bfloat16, which is what the numerical contract prescribes),
- a float64 oracle, as the largest error in ulps at the magnitude of the input pair.

NaN payloads are left to the hardware (numerical-contract.rst, "What is identical, and what is
not"), so every NaN is replaced by one canonical pattern before comparing or hashing. The inputs are
built from integer random draws and bit operations only: no platform math function touches them, so
every machine makes the same ones (their digests are in the reference too).

Regenerate the reference only when the bits are meant to change::

    python -m anyrope.check --write-reference src/anyrope/_reference_bits.json
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import array_api_compat
import numpy as np

from .._frequencies import default_inv_freq
from .._functional import rotate
from .._hostmath import sincos
from .._paths.rotation import rotate_pair
from .._rope import RoPE
from ._backends import (
    DTYPES,
    Backend,
    HostArray,
    extra_backends,
    float32_to_bfloat16_bits,
    float_values,
    known_backends,
    numpy_dtype,
)

__all__ = [
    "BASE",
    "HALF_BOUND",
    "PAIRINGS",
    "REFERENCE_FILE",
    "REGENERATE",
    "ROTARY_DIM",
    "SEED",
    "SHAPE",
    "Row",
    "canonical_digest",
    "checked_backends",
    "compute_reference",
    "format_rows",
    "load_reference",
    "make_inputs",
    "run_check",
    "unavailable_backends",
    "write_reference",
]

SEED = 20250611
SHAPE = (2, 24, 3, 64)
ROTARY_DIM = 48
BASE = 500000.0
HALF_BOUND = 0.51
PAIRINGS = ("half-split", "interleaved")
REFERENCE_FILE = "_reference_bits.json"
REGENERATE = f"python -m anyrope.check --write-reference src/anyrope/{REFERENCE_FILE}"
_PARAMETERS = {
    "seed": SEED,
    "shape": list(SHAPE),
    "layout": "bshd",
    "rotary_dim": ROTARY_DIM,
    "base": BASE,
}
"""The settings of the check, as the reference file holds them."""


_FORMATS: dict[str, tuple[int, int, type[np.unsignedinteger[Any]]]] = {
    "float16": (5, 10, np.uint16),
    "bfloat16": (8, 7, np.uint16),
    "float32": (8, 23, np.uint32),
    "float64": (11, 52, np.uint64),
}
"""(exponent bits, explicit significand bits, unsigned type of the bit pattern) of each dtype."""


def _ulp(magnitude: HostArray, dtype: str) -> HostArray:
    """The spacing of ``dtype`` at ``magnitude`` (>= the subnormal spacing)."""
    exponent_bits, significand_bits, _ = _FORMATS[dtype]
    smallest_normal = 2.0 ** (2 - 2 ** (exponent_bits - 1))
    exponent = np.floor(np.log2(np.maximum(magnitude, smallest_normal)))
    return np.asarray(np.exp2(exponent - significand_bits))


def _pair_indices(rotary_dim: int, interleaved: bool) -> tuple[Any, Any]:
    """The indices of the first and the second element of each rotated pair."""
    i = np.arange(rotary_dim // 2)
    return (2 * i, 2 * i + 1) if interleaved else (i, i + rotary_dim // 2)


def _pair_magnitude(x: HostArray, rotary_dim: int, interleaved: bool) -> HostArray:
    """``hypot(x0, x1)`` of each element's pair; the element itself past ``rotary_dim``."""
    x = np.asarray(x, dtype=np.float64)
    first, second = _pair_indices(rotary_dim, interleaved)
    magnitude: HostArray = np.abs(x)
    magnitude[..., first] = magnitude[..., second] = np.hypot(x[..., first], x[..., second])
    return magnitude


def _max_ulp_error(
    result: HostArray,
    reference: HostArray,
    x: HostArray,
    *,
    dtype: str,
    rotary_dim: int,
    interleaved: bool,
) -> float:
    """Largest ``|result - reference|`` in ulps of ``dtype`` at the input pair's magnitude.

    The ulp is taken at the magnitude of the input pair ``hypot(x0, x1)``: a rotation's
    rounding error scales with its input, and where an output cancels to near zero no
    method can do better than that (issue 4, numerical-contract.rst, "Accuracy"). Pairs
    with an infinity or NaN have no ulp error and are left out (the check compares their
    bits).
    """
    magnitude = _pair_magnitude(x, rotary_dim, interleaved)
    finite = np.isfinite(magnitude)
    error = np.abs(np.asarray(result, dtype=np.float64) - reference)[finite]
    return float(np.max(error / _ulp(magnitude[finite], dtype), initial=0.0))


@dataclass(frozen=True)
class Row:
    """One line of the check: a backend, dtype and pairing, and what was found."""

    backend: str
    device: str
    dtype: str
    pairing: str
    path: str
    same_inputs: bool
    same_as_reference: bool
    same_as_numpy: bool
    max_ulp: float

    @property
    def ok(self) -> bool:
        """Same bits as the reference and NumPy; half types within ``HALF_BOUND``.

        Returns
        -------
        bool
            True when the row passes: the same bits as the reference and as NumPy here,
            and for float16 and bfloat16 a largest error of at most ``HALF_BOUND`` ulp.
        """
        bound_ok = self.max_ulp <= HALF_BOUND if self.dtype in ("float16", "bfloat16") else True
        return self.same_as_reference and self.same_as_numpy and bound_ok


def _positions(rng: np.random.Generator) -> HostArray:
    """Positions of shape ``SHAPE[:2]``: random below 2**31, the edges, and near 2**53."""
    # Random magnitudes, so that small positions are as common as huge ones.
    limits = np.left_shift(np.int64(1), rng.integers(1, 32, size=SHAPE[:2]))
    positions: HostArray = rng.integers(0, limits)
    positions[0, :3] = [0, 1, 2**31 - 1]
    positions[1, -3:] = [2**53 - 2**20 - 1, 2**53 - 2, 2**53 - 1]
    return positions


def _special_bits(dtype: str) -> list[int]:
    """Signed zeros, infinities, quiet and signaling NaN, subnormals, the smallest normal."""
    exponent_bits, significand_bits, _ = _FORMATS[dtype]
    sign = 1 << (exponent_bits + significand_bits)
    inf = ((1 << exponent_bits) - 1) << significand_bits
    quiet = 1 << (significand_bits - 1)
    top_subnormal = (1 << significand_bits) - 1
    zeros, infinities = [0, sign], [inf, sign | inf]
    nans = [inf | quiet, sign | inf | quiet, inf | 1]
    subnormals = [1, sign | 1, top_subnormal, sign | quiet | 3]
    return [*zeros, *infinities, *nans, *subnormals, 1 << significand_bits]


def _input_bits(rng: np.random.Generator, dtype: str) -> HostArray:
    """Bit patterns of shape ``SHAPE``: magnitudes 2**-6 .. 2**4, with special values."""
    exponent_bits, significand_bits, unsigned = _FORMATS[dtype]
    bias = (1 << (exponent_bits - 1)) - 1
    sign = rng.integers(0, 2, size=SHAPE, dtype=np.uint64)
    exponent = rng.integers(bias - 6, bias + 4, size=SHAPE, dtype=np.uint64)
    significand = rng.integers(0, 1 << significand_bits, size=SHAPE, dtype=np.uint64)
    bits = (
        (sign << np.uint64(exponent_bits + significand_bits))
        | (exponent << np.uint64(significand_bits))
        | significand
    )
    specials = np.array(_special_bits(dtype), dtype=np.uint64)
    where = rng.integers(0, bits.size, size=bits.size // 32)
    bits.flat[where] = specials[rng.integers(0, specials.size, size=where.size)]
    return bits.astype(unsigned)


def make_inputs(dtype: str) -> tuple[HostArray, HostArray]:
    """The check's input bit patterns for ``dtype`` and its int64 positions.

    Only integer draws of :func:`numpy.random.default_rng` and bit operations make them:
    the same arrays on every machine.

    Parameters
    ----------
    dtype : str
        One of ``"float16"``, ``"bfloat16"``, ``"float32"``, ``"float64"``.

    Returns
    -------
    bits : numpy.ndarray
        Unsigned integers of the dtype's width, shape ``SHAPE`` (layout ``bshd``).
    positions : numpy.ndarray
        Positions as int64, shape ``SHAPE[:2]``, from 0 to ``2**53 - 1``.

    Examples
    --------
    >>> from anyrope.check import make_inputs
    >>> bits, positions = make_inputs("float16")
    >>> bits.dtype.name, bits.shape, int(positions.max()) == 2**53 - 1
    ('uint16', (2, 24, 3, 64), True)
    """
    if dtype not in _FORMATS:
        raise ValueError(f"`dtype` must be one of {', '.join(DTYPES)}; got {dtype!r}")
    rng = np.random.default_rng(SEED)
    positions = _positions(rng)
    return _input_bits(rng, dtype), positions


def _little_endian(a: HostArray) -> bytes:
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def canonical_digest(bits: HostArray, dtype: str) -> str:
    """SHA-256 of ``dtype`` bit patterns, every NaN first replaced by one quiet NaN.

    Parameters
    ----------
    bits : numpy.ndarray
        Unsigned integers of the dtype's width (any shape; hashed in C order).
    dtype : str
        One of ``"float16"``, ``"bfloat16"``, ``"float32"``, ``"float64"``.

    Returns
    -------
    str
        64 hexadecimal digits.

    Examples
    --------
    >>> import numpy as np
    >>> from anyrope.check import canonical_digest
    >>> x86_nan, arm_nan = np.array([0xFE00], np.uint16), np.array([0x7E00], np.uint16)
    >>> canonical_digest(x86_nan, "float16") == canonical_digest(arm_nan, "float16")
    True
    """
    exponent_bits, significand_bits, unsigned = _FORMATS[dtype]
    exponent = ((1 << exponent_bits) - 1) << significand_bits
    significand = (1 << significand_bits) - 1
    bits = np.asarray(bits, dtype=unsigned)
    nan = ((bits & unsigned(exponent)) == exponent) & ((bits & unsigned(significand)) != 0)
    canonical = np.where(nan, unsigned(exponent | (1 << (significand_bits - 1))), bits)
    return hashlib.sha256(_little_endian(canonical)).hexdigest()


def _rotate(x: Any, positions: Any, interleaved: bool) -> Any:
    return rotate(x, positions, rotary_dim=ROTARY_DIM, base=BASE, interleaved=interleaved)


def _numpy_bits(bits: HostArray, dtype: str, positions: HostArray, interleaved: bool) -> HostArray:
    """The NumPy result's bits (bfloat16 without ml_dtypes: float32 result, rounded once)."""
    native = numpy_dtype(dtype)
    if native is None:
        return float32_to_bfloat16_bits(_rotate(float_values(bits, dtype), positions, interleaved))
    return np.ascontiguousarray(_rotate(bits.view(native), positions, interleaved)).view(bits.dtype)


def _oracle(x: HostArray, positions: HostArray, interleaved: bool) -> HostArray:
    """The rotation in float64 by the contract's float64 angle, with exact cos and sin.

    theta and cos/sin come from anyrope's own host math (IEEE basic operations only), so
    the oracle is the same on every machine; it is not the code under test, which rounds
    the tables to the table dtype and computes in the compute dtype.
    """
    first, second = _pair_indices(ROTARY_DIM, interleaved)
    s, c = sincos(positions[..., None].astype(np.float64) * default_inv_freq(ROTARY_DIM, BASE))
    s, c = s[..., None, :], c[..., None, :]
    y = x.copy()
    y[..., first], y[..., second] = rotate_pair(x[..., first], x[..., second], c, s)
    return y


def _path(x: Any) -> str:
    """The implementation ``rotate(x, ...)`` takes (``impl="auto"``)."""
    path = RoPE(int(x.shape[-1]), rotary_dim=ROTARY_DIM, base=BASE).path(x)
    if array_api_compat.is_dask_array(x):
        return f"{path} per chunk"
    if array_api_compat.is_jax_array(x) and path in ("blocked", "numba"):
        return f"{path} via NumPy"
    return path


def compute_reference() -> dict[str, Any]:
    """The reference as NumPy computes it on this machine (what the shipped file holds).

    Returns
    -------
    dict
        The input parameters (``seed``, ``shape``, ``layout``, ``rotary_dim``, ``base``),
        ``inputs``: a digest of each dtype's inputs and positions, and ``outputs``: the
        NaN-canonical digest (:func:`canonical_digest`) of each ``"<dtype> <pairing>"``.

    Examples
    --------
    >>> from anyrope.check import compute_reference, load_reference
    >>> compute_reference() == load_reference()
    True
    """
    inputs, outputs = {}, {}
    for dtype in DTYPES:
        bits, positions = make_inputs(dtype)
        inputs[dtype] = hashlib.sha256(_little_endian(bits) + _little_endian(positions)).hexdigest()
        for pairing in PAIRINGS:
            y = _numpy_bits(bits, dtype, positions, pairing == "interleaved")
            outputs[f"{dtype} {pairing}"] = canonical_digest(y, dtype)
    return {"regenerate": REGENERATE, **_PARAMETERS, "inputs": inputs, "outputs": outputs}


def load_reference() -> dict[str, Any]:
    """The reference shipped in the package (``anyrope/_reference_bits.json``).

    Returns
    -------
    dict
        As :func:`compute_reference` returns it.

    Examples
    --------
    >>> from anyrope.check import load_reference
    >>> sorted(load_reference()["outputs"])[:2]
    ['bfloat16 half-split', 'bfloat16 interleaved']
    """
    text = resources.files("anyrope").joinpath(REFERENCE_FILE).read_text(encoding="utf-8")
    reference: dict[str, Any] = json.loads(text)
    return reference


def write_reference(path: str | Path) -> None:
    """Write :func:`compute_reference` to ``path`` as JSON.

    Parameters
    ----------
    path : str or pathlib.Path
        The file to write, normally ``src/anyrope/_reference_bits.json`` in a checkout.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> from anyrope.check import load_reference, write_reference
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = pathlib.Path(folder) / "reference.json"
    ...     write_reference(path)
    ...     json.loads(path.read_text()) == load_reference()
    True
    """
    text = json.dumps(compute_reference(), indent=2) + "\n"
    Path(path).write_text(text, encoding="utf-8")


def _settings(parameters: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in parameters.items())


def checked_backends() -> list[Backend]:
    """The usable backends: those of the test matrix, then JAX and dask.

    Returns
    -------
    list of Backend
        The backends whose ``unavailable`` is ``None``, NumPy on the CPU first.

    Examples
    --------
    >>> from anyrope.check import checked_backends
    >>> checked_backends()[0].id
    'numpy-cpu'
    """
    return [b for b in _all_backends() if b.unavailable is None]


def _all_backends() -> list[Backend]:
    return [*known_backends(), *extra_backends()]


def run_check(
    reference: Mapping[str, Any] | None = None, backends: Sequence[Backend] | None = None
) -> list[Row]:
    """Run the check and return its rows.

    Parameters
    ----------
    reference : mapping, optional
        Reference digests as ``compute_reference`` returns them; default: the
        shipped ones (``load_reference``).
    backends : sequence of Backend, optional
        Default: every usable backend (``checked_backends``).

    Returns
    -------
    list of Row
        One per backend, dtype it has and pairing.

    Examples
    --------
    >>> from anyrope.tools._backends import known_backends
    >>> from anyrope.check import run_check
    >>> rows = run_check(backends=known_backends()[:1])
    >>> sorted({row.pairing for row in rows}), all(row.ok for row in rows)
    (['half-split', 'interleaved'], True)
    """
    reference = load_reference() if reference is None else reference
    written = {name: reference.get(name) for name in _PARAMETERS}
    if written != _PARAMETERS:
        raise ValueError(
            f"`reference` was written for {_settings(written)}; this check uses "
            f"{_settings(_PARAMETERS)}: regenerate it with `{REGENERATE}`"
        )
    backends = checked_backends() if backends is None else backends
    here = compute_reference()  # NumPy's digests on this machine
    rows = []
    # The inputs hold signaling NaNs and infinities: NumPy's casts and the oracle would
    # warn about the NaNs they make, which are expected and left out of the ulp figure.
    with np.errstate(invalid="ignore", over="ignore"):
        for dtype, pairing in itertools.product(DTYPES, PAIRINGS):
            bits, positions = make_inputs(dtype)
            x64 = float_values(bits, dtype).astype(np.float64)  # exact
            interleaved, key = pairing == "interleaved", f"{dtype} {pairing}"
            same_inputs = here["inputs"][dtype] == reference["inputs"][dtype]
            want, numpy_here = reference["outputs"][key], here["outputs"][key]
            oracle = _oracle(x64, positions, interleaved)
            for backend in (b for b in backends if dtype in b.dtype_names):
                with backend.scope():
                    x = backend.from_bits(bits, dtype)
                    y = _rotate(x, backend.from_numpy(positions), interleaved)
                    got = canonical_digest(backend.to_bits(y), dtype)
                    values, path = backend.to_numpy(y), _path(x)
                error = _max_ulp_error(
                    values, oracle, x64, dtype=dtype, rotary_dim=ROTARY_DIM, interleaved=interleaved
                )
                same = (same_inputs, same_inputs and got == want, got == numpy_here)
                rows.append(
                    Row(backend.name, backend.device_label, dtype, pairing, path, *same, error)
                )
    return rows


def unavailable_backends() -> list[tuple[str, str]]:
    """(backend id, reason) for each backend that is not checked here.

    Returns
    -------
    list of tuple of (str, str)
        The id of each unusable backend and why it is unusable (for example, not
        installed), in the order of :func:`checked_backends`.

    Examples
    --------
    >>> from anyrope.check import unavailable_backends
    >>> all(reason for _, reason in unavailable_backends())
    True
    """
    return [(b.id, b.unavailable) for b in _all_backends() if b.unavailable is not None]


def format_rows(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table.

    Parameters
    ----------
    rows : sequence of Row
        The rows to show, as :func:`run_check` returns them.

    Returns
    -------
    str
        A header line and one line per row, columns padded to a common width, without a
        final newline.

    Examples
    --------
    >>> from anyrope.check import Row, format_rows
    >>> row = Row("numpy", "cpu", "float32", "half-split", "blocked", True, True, True, 0.25)
    >>> print(format_rows([row]))
    backend  device  dtype    pairing     path     reference  numpy  max ulp  status
    numpy    cpu     float32  half-split  blocked  yes        yes    0.250    ok
    """
    header = (*(f.name for f in fields(Row)[:5]), "reference", "numpy", "max ulp", "status")
    lines = [
        (
            *astuple(r)[:5],
            "yes" if r.same_as_reference else "NO" if r.same_inputs else "NO (inputs)",
            "yes" if r.same_as_numpy else "NO",
            f"{r.max_ulp:.3f}" if r.max_ulp < 1e4 else f"{r.max_ulp:.2e}",
            "ok" if r.ok else "FAIL",
        )
        for r in rows
    ]
    widths = [max(len(c) for c in column) for column in zip(header, *lines, strict=True)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *lines)
    )
