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

from typing import TYPE_CHECKING, Any

import array_api_compat
import numpy as np

from ._namespace import Array
from ._validation import MAX_POSITION

if TYPE_CHECKING:
    from ._tables import TableCache


def is_traced(x: Array) -> bool:
    """True for a JAX array whose values are abstract (inside ``jit``, ``vmap``, ...)."""
    if not array_api_compat.is_jax_array(x):
        return False
    import jax

    return isinstance(x, jax.core.Tracer)


def on_host(
    arrays: tuple[Array, ...], positions: object
) -> tuple[tuple[np.ndarray[Any, Any], ...], object] | None:
    """NumPy views of concrete JAX CPU ``arrays`` and of ``positions``, else ``None``.

    ``None`` when anything is traced, lives on another device, or ``positions`` is an
    array of another library (the JAX path then says so).
    """
    import jax

    if any(isinstance(x, jax.core.Tracer) for x in arrays):
        return None
    if any(device.platform != "cpu" for x in arrays for device in x.devices()):
        return None
    if positions is None or isinstance(positions, int):
        return tuple(np.asarray(x) for x in arrays), positions
    if not array_api_compat.is_jax_array(positions) or is_traced(positions):
        return None
    return tuple(np.asarray(x) for x in arrays), np.asarray(positions)


def back_to_jax(results: tuple[Array, ...], *, like: tuple[Array, ...]) -> tuple[Array, ...]:
    """Each NumPy result as a JAX array on the device of the matching input."""
    import jax

    return tuple(
        jax.device_put(y, next(iter(x.devices()))) for y, x in zip(results, like, strict=True)
    )


def traced_tables(
    cache: TableCache, positions: Array, dtype: np.dtype[Any], pairs: int
) -> tuple[Array, Array]:
    """cos/sin of shape ``positions.shape + (pairs,)``, built on the host when run.

    Out-of-range positions cannot be reported while tracing; the callback raises a
    ``ValueError`` when the compiled function runs (JAX re-raises it as a runtime error).
    """
    import array_api_compat.numpy as host_xp
    import jax

    def build(values: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        host = np.asarray(values, dtype=np.int64)
        if host.size and (int(host.min()) < 0 or int(host.max()) >= MAX_POSITION):
            raise ValueError(
                f"`positions` must lie in [0, 2**53); got values in [{host.min()}, {host.max()}]"
            )
        cos, sin = cache.build(host, host_xp, "cpu", dtype)
        return np.asarray(cos), np.asarray(sin)

    shape = jax.ShapeDtypeStruct((*positions.shape, pairs), dtype)
    cos, sin = jax.pure_callback(build, (shape, shape), positions, vmap_method="expand_dims")
    return cos, sin
