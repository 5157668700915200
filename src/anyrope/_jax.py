"""JAX: under ``jax.jit``, tables for positions whose values are not known while tracing
(eager arrays on the CPU take the route of :mod:`anyrope._paths.jax_host`).

Traced: when ``positions`` is a traced array, the host cannot read its values (nor its
maximum) at trace time, so the tables are built when the compiled function runs, by a
host callback (``jax.pure_callback``) that receives the concrete positions and builds
their cos/sin exactly as the eager path does (float64 with NumPy, rounded once). Every
table entry depends only on its own position, so the gathered values are the same bits
as in eager mode. Offsets given as Python ints and concrete arrays need no callback.

Concrete under a trace: inside ``jit`` every ``jax.numpy`` operation is staged into the
graph, even on concrete arrays. The work done on the host's word (checking concrete
positions, building the tables) runs under :func:`anyrope._namespace.outside_trace`, so
that it is computed at once and enters the graph as constants: nothing built from a
tracer is kept (the table caches outlive every trace) nor read on the host.

This module is imported only for JAX arrays, when JAX is already in ``sys.modules``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat
import numpy as np

from ._namespace import Array


def is_traced(x: Array) -> bool:
    """True for a JAX array whose values are abstract (inside ``jit``, ``vmap``, ...)."""
    if not array_api_compat.is_jax_array(x):
        return False
    import jax

    return isinstance(x, jax.core.Tracer)


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
