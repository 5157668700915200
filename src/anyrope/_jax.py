"""JAX: eager arrays on the CPU go through NumPy; under ``jax.jit``, tables for positions
whose values are not known while tracing.

Eager: XLA's CPU backend flushes subnormal inputs and results to zero, even outside
``jit`` (jax-ml/jax#16200), which would break the numerical contract. Concrete arrays on
the CPU are therefore rotated by the NumPy path on zero-copy views and the results put
back on their device: the same bits as every other backend, and without compiling an
XLA computation per operation and shape.

Traced: when ``positions`` is a traced array, the host cannot read its values (nor its
maximum) at trace time, so the tables are built when the compiled function runs, by a
host callback (``jax.pure_callback``) that receives the concrete positions and builds
their cos/sin exactly as the eager path does (float64 with NumPy, rounded once). Every
table entry depends only on its own position, so the gathered values are the same bits
as in eager mode. Offsets given as Python ints and concrete arrays need no callback.

This module is imported only for JAX arrays, when JAX is already in ``sys.modules``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat
import numpy as np

from ._namespace import Array
from ._validation import MAX_POSITION


def is_traced(x: Array) -> bool:
    """True for a JAX array whose values are abstract (inside ``jit``, ``vmap``, ...)."""
    if not array_api_compat.is_jax_array(x):
        return False
    import jax

    return isinstance(x, jax.core.Tracer)


def on_host(
    arrays: tuple[Array, ...], positions: object, cu_seqlens: object = None
) -> tuple[tuple[np.ndarray[Any, Any], ...], object, object] | None:
    """NumPy views of concrete JAX CPU ``arrays``, ``positions`` and ``cu_seqlens``,
    else ``None``.

    ``None`` when anything is traced, lives on another device, or ``positions`` or
    ``cu_seqlens`` is an array of another library (the JAX path then says so).
    """
    import jax

    if any(isinstance(x, jax.core.Tracer) for x in arrays):
        return None
    if any(device.platform != "cpu" for x in arrays for device in x.devices()):
        return None
    host: list[object] = []
    for value in (positions, cu_seqlens):
        if value is None or isinstance(value, int):
            host.append(value)
        elif array_api_compat.is_jax_array(value) and not is_traced(value):
            host.append(np.asarray(value))
        else:
            return None
    return tuple(np.asarray(x) for x in arrays), host[0], host[1]


def back_to_jax(results: tuple[Array, ...], *, like: tuple[Array, ...]) -> tuple[Array, ...]:
    """Each NumPy result as a JAX array on the device of the matching input."""
    import jax

    return tuple(
        jax.device_put(y, next(iter(x.devices()))) for y, x in zip(results, like, strict=True)
    )


def host_callback(
    build: Callable[[np.ndarray[Any, Any]], tuple[np.ndarray[Any, Any], ...]],
    positions: Array,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
) -> tuple[Array, Array]:
    """Two arrays of ``shape`` and ``dtype`` that ``build`` makes from the concrete
    ``positions`` (int64, on the host) when the compiled function runs.

    Out-of-range positions cannot be reported while tracing; the callback raises a
    ``ValueError`` when the compiled function runs (JAX re-raises it as a runtime error).
    """
    import jax

    def checked(values: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], ...]:
        host = np.asarray(values, dtype=np.int64)
        if host.size and (int(host.min()) < 0 or int(host.max()) >= MAX_POSITION):
            raise ValueError(
                f"`positions` must lie in [0, 2**53); got values in [{host.min()}, {host.max()}]"
            )
        return tuple(np.asarray(a) for a in build(host))

    result = jax.ShapeDtypeStruct(shape, dtype)
    cos, sin = jax.pure_callback(checked, (result, result), positions, vmap_method="expand_dims")
    return cos, sin


def has_int64() -> bool:
    """Whether JAX has 64-bit integers (``jax_enable_x64``); without them int64 is int32."""
    import jax

    return bool(jax.config.jax_enable_x64)
