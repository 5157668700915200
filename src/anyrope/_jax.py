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

Concrete under a trace: inside ``jit`` every ``jax.numpy`` operation is staged into the
graph, even on concrete arrays. The work done on the host's word (checking concrete
positions, building the tables) runs under :func:`outside_trace`, so that it is
computed at once and enters the graph as constants: nothing built from a tracer is kept
(the table caches outlive every trace) nor read on the host.

This module is imported only for JAX arrays, when JAX is already in ``sys.modules``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import array_api_compat
import numpy as np

from ._call import Call
from ._namespace import Array, Namespace, namespace_of
from ._offsets import Offsets


def is_traced(x: Array) -> bool:
    """True for a JAX array whose values are abstract (inside ``jit``, ``vmap``, ...)."""
    if not array_api_compat.is_jax_array(x):
        return False
    import jax

    return isinstance(x, jax.core.Tracer)


_NOTHING = contextlib.nullcontext()
"""The context of the other libraries (reentrant, so one serves every call)."""


def outside_trace(xp: Namespace) -> contextlib.AbstractContextManager[Any]:
    """A context in which JAX computes operations on concrete arrays at once, even inside
    a trace (``jax.ensure_compile_time_eval``): their results are concrete arrays, which a
    cache may keep and a check may read. Operations on traced arrays are still traced.
    Nothing for other libraries.
    """
    if not array_api_compat.is_jax_namespace(xp):
        return _NOTHING
    import jax

    evaluate: contextlib.AbstractContextManager[Any] = jax.ensure_compile_time_eval()
    return evaluate


def on_host(call: Call) -> Call | None:
    """``call`` on NumPy views of its concrete JAX CPU arrays, which XLA would flush to
    zero when subnormal, and of its positions (or :class:`~anyrope.Offsets` of them) and
    ``cu_seqlens``, planned without ``xp``; ``None`` for everything else.

    ``None`` for other libraries, in place, an ``impl`` other than the NumPy route's,
    or when anything is traced, lives on another device, or the positions or
    ``cu_seqlens`` are an array of another library (the JAX path then says so).
    """
    arrays, positions = call.arrays, call.positions
    if (
        not array_api_compat.is_jax_array(arrays[0])
        or call.inplace
        or call.impl not in ("auto", "array_api")
    ):
        return None
    # Each array is asked for its devices.
    namespace_of(*arrays, xp=call.xp, argument=call.names)
    import jax

    if any(isinstance(x, jax.core.Tracer) for x in arrays):
        return None
    if any(device.platform != "cpu" for x in arrays for device in x.devices()):
        return None
    offsets = isinstance(positions, Offsets)
    host = [positions.values if isinstance(positions, Offsets) else positions, call.cu_seqlens]
    for index, value in enumerate(host):
        if array_api_compat.is_jax_array(value) and not isinstance(value, jax.core.Tracer):
            host[index] = np.asarray(value)
        elif not (value is None or isinstance(value, int)):
            return None
    positions = Offsets(host[0]) if offsets else host[0]
    arrays = tuple(np.asarray(x) for x in arrays)
    return call._replace(arrays=arrays, positions=positions, cu_seqlens=host[1], xp=None)


def back_to_jax(results: tuple[Array, ...], *, like: tuple[Array, ...]) -> tuple[Array, ...]:
    """Each NumPy result as a JAX array with the sharding of the matching input (on its
    device, or split over its devices as it was)."""
    import jax

    return tuple(jax.device_put(y, x.sharding) for y, x in zip(results, like, strict=True))


def when_run(
    compute: Callable[[np.ndarray[Any, Any]], tuple[np.ndarray[Any, Any], ...]],
    values: Array,
    outputs: tuple[tuple[tuple[int, ...], np.dtype[Any]], ...],
) -> tuple[Array, ...]:
    """Arrays of the ``outputs`` (shape and dtype of each) that ``compute`` makes on the
    host from the concrete ``values`` when the compiled function runs
    (``jax.pure_callback``); an error ``compute`` raises is raised then.

    ``compute`` must work value by value: under ``vmap`` it receives the whole batch.
    """
    import jax

    def on_host(concrete: Any) -> tuple[np.ndarray[Any, Any], ...]:
        return tuple(np.asarray(a) for a in compute(np.asarray(concrete)))

    results = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in outputs)
    return tuple(jax.pure_callback(on_host, results, values, vmap_method="expand_dims"))


def has_int64() -> bool:
    """Whether JAX has 64-bit integers (``jax_enable_x64``); without them int64 is int32."""
    import jax

    return bool(jax.config.jax_enable_x64)


def take_filled(table: Array, rows: Array) -> Array:
    """Rows ``rows`` of ``table``, NaN for rows past its end, sharded as ``rows`` are
    (:func:`anyrope._tables.gather_rows`)."""
    import jax
    import jax.numpy as jnp

    # Explicitly sharded positions (jax.sharding.AxisType.Explicit) shard the rows alike;
    # JAX asks for that sharding to be named.
    sharding = jax.typeof(rows).sharding
    out = None
    if any(axis is not None for axis in sharding.spec):
        out = jax.NamedSharding(sharding.mesh, jax.P(*sharding.spec, None))
    return table.at[rows].get(mode="fill", fill_value=jnp.nan, out_sharding=out)
