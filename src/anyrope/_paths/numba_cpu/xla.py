"""The numba kernel as an XLA FFI handler, for :mod:`anyrope._jax`: under ``jax.jit`` on
the CPU, XLA calls the kernel that rotates NumPy arrays, so a jitted rotation has NumPy's
bits (XLA would contract ``x0 * c - x1 * s`` into a fused multiply-add).

The handler reads XLA's call frame (``xla/ffi/api/c_api.h``, API 0.x) by its fixed
64-bit offsets: operands ``x``, ``cos``, ``sin``, one result. The tables have the
shape of ``x`` with a size-1 heads axis, ``pairs`` entries last, and its leading axes.
XLA runs compiled code with flush-to-zero and denormals-are-zero set (jax-ml/jax#16200):
the handler clears both on x86 while the kernel runs, so subnormals keep their bits.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.extending import intrinsic

from ..._cpu_memory import STORAGE_DTYPES
from . import kernels
from .kernels import instruction

_METADATA = 1
"""XLA_FFI_Extension_Metadata: XLA asks the handler which API it speaks."""
_X86 = platform.machine().lower() in ("x86_64", "amd64")
_IEEE_MXCSR = 0x1F80
"""The SSE control word with every exception masked, round to nearest, no FTZ or DAZ."""


_BYTE_POINTER = ir.IntType(8).as_pointer()
_pointer = instruction(types.int64, types.voidptr, lambda b, v: b.inttoptr(v, _BYTE_POINTER))
_address = instruction(types.voidptr, types.int64, lambda b, v: b.ptrtoint(v, ir.IntType(64)))


@intrinsic
def _swap_mxcsr(typingctx: Any, value: Any) -> Any:
    """Set the SSE control word to ``value``; return the one it replaces (x86 only)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32 = ir.IntType(32)
        function = ir.FunctionType(ir.VoidType(), [_BYTE_POINTER])
        module = builder.module
        store, load = (
            module.globals.get(name) or ir.Function(module, function, name)
            for name in ("llvm.x86.sse.stmxcsr", "llvm.x86.sse.ldmxcsr")
        )
        slot = builder.alloca(i32)
        pointer = builder.bitcast(slot, _BYTE_POINTER)
        builder.call(store, [pointer])
        old = builder.load(slot)
        builder.store(builder.trunc(args[0], i32), slot)
        builder.call(load, [pointer])
        return builder.zext(old, ir.IntType(64))

    return types.int64(types.int64), codegen


@njit(inline="always")
def _word(address: int) -> Any:
    return carray(_pointer(address), (1,), np.int64)[0]


@njit(inline="always")
def _array(buffer: int, shape: Any, dtype: Any) -> Any:
    """The data of an XLA_FFI_Buffer (at offset 24) as an array of ``shape``."""
    return carray(_pointer(_word(buffer + 24)), shape, dtype)


def _handler(interleaved: bool, dtype: str) -> Any:
    # What the kernel sees of x, and the dtype of the tables (the compute dtype).
    storage, compute = STORAGE_DTYPES[dtype], np.float64 if dtype == "float64" else np.float32

    @cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
    def handler(frame: Any) -> Any:
        call = _address(frame)
        extension = _word(call + 8)
        if extension != 0:
            if carray(_pointer(extension + 8), (1,), np.int32)[0] == _METADATA:
                metadata = _word(extension + 24)
                carray(_pointer(metadata + 24), (2,), np.int32)[:] = (0, 1)  # API 0.1
                carray(_pointer(metadata + 32), (1,), np.int32)[0] = 0  # no traits
            return _pointer(0)
        args, result = _word(call + 72), _word(_word(call + 112))
        x, cos, sin = _word(args), _word(args + 8), _word(args + 16)
        rank, dims, table = _word(x + 32), _word(x + 40), _word(cos + 40)
        n0 = 1
        for axis in range(rank - 3):
            n0 *= _word(dims + 8 * axis)
        last = 8 * rank
        n1, n2, width = _word(dims + last - 24), _word(dims + last - 16), _word(dims + last - 8)
        t1, t2, pairs = _word(table + last - 24), _word(table + last - 16), _word(table + last - 8)
        # Row of x[a, b, c]: a * t1 * t2 + b * (t1 > 1) * t2 + c * (t2 > 1).
        rows = (0, t1 * t2, t2 if t1 > 1 else 0, 1 if t2 > 1 else 0)
        shape, tables = (n0, n1, n2, width), (n0 * t1 * t2, pairs)
        c, s = _array(cos, tables, compute), _array(sin, tables, compute)
        given, rotated = _array(x, shape, storage), _array(result, shape, storage)
        saved = _swap_mxcsr(_IEEE_MXCSR) if _X86 else 0
        kernels.rotate(given, rotated, c, s, rows, interleaved, 0, n0 * n1)
        if _X86:
            _swap_mxcsr(saved)
        return _pointer(0)

    return handler


@functools.cache
def register(interleaved: bool, dtype: str) -> tuple[str, Any]:
    """Register the handler for ``dtype`` with XLA's CPU runtime (once, each compiled when
    first used): its target name, and the compiled handler (kept alive by the cache: XLA
    holds only its address)."""
    import jax

    name = f"anyrope_rotate_{dtype}_{'interleaved' if interleaved else 'half'}"
    handler = _handler(interleaved, dtype)
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler.address), platform="cpu")
    return name, handler
