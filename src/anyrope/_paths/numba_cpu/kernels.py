"""The compiled CPU kernel (numba): one row of pairs at a time, the contract's bits.

Each ``*``, ``-``, ``+`` is one IEEE-754 operation in the compute dtype: numba leaves
floating-point contraction off unless ``fastmath`` is asked for, so no FMA is formed
(``tests/test_numba_path.py`` reads the machine code to prove it), and it sets no
flush-to-zero mode. Half types arrive as 16-bit integers (float16 as ``uint16``,
bfloat16 as ``int16``) and are converted to float32 and back exactly, with
round-to-nearest-even, by integer operations that vectorize (NumPy's float16
conversion, by comparison, runs one element at a time and costs ten times as much).

Compiled code is cached on disk (``cache=True``): the first process on a machine
compiles each variant it meets (about a second), later processes load it.

This module imports numba; :mod:`anyrope._paths.numba_cpu` imports it only when the path
runs.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

import llvmlite.binding
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.extending import intrinsic, overload
from numba.np.arrayobj import populate_array

from ..rotation import rotate_pair


def _hardware_float16() -> bool:
    """Whether float16 is converted by the CPU's own instructions (x86 F16C): exact, and
    the same bits as the integer conversion below, at a third of its cost.

    Only when numba compiles for this CPU and it has F16C: elsewhere LLVM would call a
    run-time function that numba does not provide (NUMBA_CPU_NAME=generic crashes).
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if config.CPU_NAME not in (None, "host"):
        return False
    features = config.CPU_FEATURES or llvmlite.binding.get_host_cpu_features().flatten()
    return "+f16c" in features.split(",")


HARDWARE_FLOAT16 = _hardware_float16()
"""Decided once per process, from what numba compiles for (its cache is keyed by it too)."""


_I16, _I32 = ir.IntType(16), ir.IntType(32)


@intrinsic
def _float32_from_bits(typingctx: Any, bits: Any) -> Any:
    """The float32 whose bits are the low 32 bits of an integer."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        value = args[0]
        if bits.bitwidth > 32:
            value = builder.trunc(value, _I32)
        elif bits.bitwidth < 32:
            value = builder.zext(value, _I32)
        return builder.bitcast(value, ir.FloatType())

    return types.float32(bits), codegen


def instruction(operand: Any, result: Any, emit: Callable[[Any, Any], Any]) -> Any:
    """A numba intrinsic from the numba type ``operand`` to ``result``: the LLVM
    instructions that ``emit(builder, value)`` adds."""

    def typing(typingctx: Any, value: Any) -> Any:
        if value != operand:
            return None
        return result(value), lambda context, builder, signature, args: emit(builder, args[0])

    return intrinsic(typing)


# The bits of a float32, as a uint32.
_bits_of_float32 = instruction(types.float32, types.uint32, lambda b, v: b.bitcast(v, _I32))
# ``fpext half to float``: one F16C instruction (exact).
_float16_to_float32_by_cpu = instruction(
    types.uint16, types.float32, lambda b, v: b.fpext(b.bitcast(v, ir.HalfType()), ir.FloatType())
)
# ``fptrunc float to half``: one F16C instruction, round to nearest even.
_float32_to_float16_by_cpu = instruction(
    types.float32, types.uint16, lambda b, v: b.bitcast(b.fptrunc(v, ir.HalfType()), _I16)
)


_U = np.uint32
_TWO_TO_112 = np.float32(2**112)


@njit(inline="never")
def float16_to_float32(h: Any) -> Any:
    """Exact: every float16 is a float32. Its exponent and significand bits, moved into
    place, are the float32 ``value * 2**-112``; one multiplication by ``2**112`` (exact:
    a power of two, and subnormals are kept) rebiases normal and subnormal values alike.
    Infinities and NaNs get the largest exponent back, and keep their payload."""
    bits = _U(h) & _U(0xFFFF)
    scaled = _float32_from_bits((bits & _U(0x7FFF)) << _U(13)) * _TWO_TO_112
    magnitude = _bits_of_float32(scaled)
    magnitude = magnitude | _U(0x7F800000) if scaled >= np.float32(65536.0) else magnitude
    return _float32_from_bits(magnitude | ((bits & _U(0x8000)) << _U(16)))


@njit(inline="never")
def float32_to_float16(value: Any) -> Any:
    """Round to nearest even, as NumPy's ``astype(float16)`` does: overflow to infinity,
    subnormal results kept; a NaN stays a NaN (quiet)."""
    bits = _bits_of_float32(value)
    sign = bits & _U(0x80000000)
    magnitude = bits ^ sign
    # Below 2**-14 the result is subnormal: adding 0.5 leaves float32's rounding
    # (to nearest even) at float16's subnormal step, 2**-24.
    subnormal = _bits_of_float32(_float32_from_bits(magnitude) + np.float32(0.5)) - _U(126 << 23)
    odd = (magnitude >> _U(13)) & _U(1)
    normal = (magnitude + _U(((15 - 127) << 23) + 0xFFF) + odd) >> _U(13)
    special = _U(0x7E00) if magnitude > _U(0x7F800000) else _U(0x7C00)
    half = normal if magnitude >= _U(113 << 23) else subnormal
    half = special if magnitude >= _U(143 << 23) else half
    return np.uint16((half | (sign >> _U(16))) & _U(0xFFFF))


@njit(inline="never")
def bfloat16_to_float32(b: Any) -> Any:
    """Exact: a bfloat16 is the top half of a float32."""
    return _float32_from_bits((_U(b) & _U(0xFFFF)) << _U(16))


def _round_to_bfloat16(builder: Any, value: Any) -> Any:
    """Round to nearest even (torch's and ml_dtypes' conversion); a NaN stays a NaN.

    Written in LLVM's 32-bit integer operations: numba would widen them to 64 bits,
    which vectorize at half the width.
    """
    bits = builder.bitcast(value, _I32)
    high = builder.lshr(bits, ir.Constant(_I32, 16))
    odd = builder.and_(high, ir.Constant(_I32, 1))
    biased = builder.add(builder.add(bits, ir.Constant(_I32, 0x7FFF)), odd)
    rounded = builder.lshr(biased, ir.Constant(_I32, 16))
    quiet = builder.or_(high, ir.Constant(_I32, 0x40))
    nan = builder.fcmp_unordered("uno", value, value)
    return builder.trunc(builder.select(nan, quiet, rounded), _I16)


float32_to_bfloat16 = instruction(types.float32, types.int16, _round_to_bfloat16)


@intrinsic
def _row(typingctx: Any, x: Any, a: Any, b: Any, c: Any) -> Any:
    """``x[a, b, c]`` typed as contiguous, for an ``x`` whose last axis has unit stride
    (the caller's check): the compiler vectorizes a row's loops only over strides it
    knows are one, and a view of a fused array is not contiguous as a whole."""
    row = types.Array(x.dtype, 1, "C")

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array = context.make_array(x)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, array.shape)
        strides = cgutils.unpack_tuple(builder, array.strides)
        index = [*args[1:], context.get_constant(types.intp, 0)]
        data = cgutils.get_item_pointer2(context, builder, array.data, shape, strides, "A", index)
        view = context.make_array(row)(context, builder)
        # No owner of its own (no reference counts per row): x outlives it.
        populate_array(view, data, [shape[3]], [array.itemsize], array.itemsize, None)
        return view._getvalue()

    return row(x, types.intp, types.intp, types.intp), codegen


def _load(value: Any) -> Any:
    """A stored element in the compute dtype (defined for numba by the overload)."""
    raise NotImplementedError


def _store(value: Any, like: Any) -> Any:
    """``value`` (compute dtype) rounded once to the storage type of ``like``."""
    raise NotImplementedError


_same = njit(inline="always")(lambda value: value)
# By storage type: float16 bits arrive as uint16, bfloat16's as int16; others as they are.
_LOADS = {
    types.uint16: _float16_to_float32_by_cpu if HARDWARE_FLOAT16 else float16_to_float32,
    types.int16: bfloat16_to_float32,
}
_STORES = {
    types.uint16: _float32_to_float16_by_cpu if HARDWARE_FLOAT16 else float32_to_float16,
    types.int16: float32_to_bfloat16,
}


# Scalars in, scalars out: with arrays passed to helpers, the compiler stops vectorizing
# the row loops. numba checks that an overload has the signature, annotations included,
# of the function it overloads.
@overload(_load)
def _load_for(value: Any) -> Any:
    convert = _LOADS.get(value, _same)

    def load(value: Any) -> Any:
        return convert(value)

    return load


@overload(_store)
def _store_for(value: Any, like: Any) -> Any:
    convert = _STORES.get(like, _same)

    def store(value: Any, like: Any) -> Any:
        return convert(value)

    return store


_rotate_pair = njit(inline="always")(rotate_pair)
"""The one formula of :mod:`anyrope._paths.rotation`, compiled into the row loops."""


@njit(nogil=True, cache=True)
def rotate(  # noqa: PLR0917 - the kernel's operands, in the order they are used
    x: Any,
    out: Any,
    cos: Any,
    sin: Any,
    rows: Any,
    interleaved: bool,
    start: int,
    stop: int,
) -> None:
    """Rotate ``x`` (n0, n1, n2, width; its last axis of unit stride) into ``out``, a
    separate C-contiguous array of the same shape.

    ``out[pair] = rotate_pair(x0, x1, c, s)`` (numerical-contract.rst, "How every path
    computes" 3), where the pairs of ``x[a, b, c]`` use the table row
    ``first + a*t0 + b*t1 + c*t2`` (``rows = (first, t0, t1, t2)``); the features past the
    rotated ones are copied. Only ``a*n1 + b`` in ``start .. stop-1`` is done: a thread's
    share.
    """
    # The row loops are written out in both kernels: behind a helper function that is not
    # inlined (as _rotate_pair is), or with the target chosen at run time, numba counts
    # references per row and the compiler stops vectorizing them (four times slower).
    first, t0, t1, t2 = rows
    n1 = x.shape[1]
    half = cos.shape[1]
    like = np.zeros(1, out.dtype)[0]
    for unit in range(start, stop):
        a = unit // n1
        b = unit - a * n1
        for c in range(x.shape[2]):
            row = first + a * t0 + b * t1 + c * t2
            x_row, out_row, cos_row, sin_row = _row(x, a, b, c), out[a, b, c], cos[row], sin[row]
            if interleaved:
                for i in range(half):
                    x0, x1 = _load(x_row[2 * i]), _load(x_row[2 * i + 1])
                    y0, y1 = _rotate_pair(x0, x1, cos_row[i], sin_row[i])
                    out_row[2 * i], out_row[2 * i + 1] = _store(y0, like), _store(y1, like)
            else:
                for i in range(half):
                    x0, x1 = _load(x_row[i]), _load(x_row[half + i])
                    y0, y1 = _rotate_pair(x0, x1, cos_row[i], sin_row[i])
                    out_row[i], out_row[half + i] = _store(y0, like), _store(y1, like)
            for f in range(2 * half, x.shape[3]):
                out_row[f] = x_row[f]


@njit(nogil=True, cache=True)
def rotate_in_place(  # noqa: PLR0917 - the kernel's operands, in the order they are used
    x: Any,
    cos: Any,
    sin: Any,
    rows: Any,
    interleaved: bool,
    start: int,
    stop: int,
) -> None:
    """:func:`rotate` with ``out`` = ``x``: each pair is read, then written. The halves
    of a row are two views, which the compiler checks for overlap once per row and
    then vectorizes."""
    first, t0, t1, t2 = rows
    n1 = x.shape[1]
    half = cos.shape[1]
    like = np.zeros(1, x.dtype)[0]
    for unit in range(start, stop):
        a = unit // n1
        b = unit - a * n1
        for c in range(x.shape[2]):
            row = first + a * t0 + b * t1 + c * t2
            x_row, cos_row, sin_row = _row(x, a, b, c), cos[row], sin[row]
            if interleaved:
                for i in range(half):
                    x0, x1 = _load(x_row[2 * i]), _load(x_row[2 * i + 1])
                    y0, y1 = _rotate_pair(x0, x1, cos_row[i], sin_row[i])
                    x_row[2 * i], x_row[2 * i + 1] = _store(y0, like), _store(y1, like)
            else:
                low, high = x_row[:half], x_row[half : 2 * half]
                for i in range(half):
                    x0, x1 = _load(low[i]), _load(high[i])
                    y0, y1 = _rotate_pair(x0, x1, cos_row[i], sin_row[i])
                    low[i], high[i] = _store(y0, like), _store(y1, like)
