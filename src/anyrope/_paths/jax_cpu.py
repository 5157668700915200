"""JAX arrays inside a trace (``jax.jit``, ``vmap``, ``grad``) on the CPU: the tables are
gathered in the graph, and XLA calls the numba kernel (:mod:`.numba_cpu.xla`) to rotate,
so the result has NumPy's bits. Eager JAX arrays on the CPU take the NumPy route before
a path is chosen (:mod:`.jax_host`); other JAX devices take the reference.
"""

from __future__ import annotations

import functools
from typing import Any

from .._namespace import Array
from .._plan import Plan
from .numba_cpu import installed

NAME = "jax"

CHECKS_POSITIONS = True
"""Traced positions are gathered in the graph (NaN rows out of range), never read."""
TABLES = "placed"


def rejects(plan: Plan) -> str | None:
    """JAX arrays for the CPU backend, when numba is installed."""
    if plan.library != "jax":
        return f"needs JAX arrays; got {plan.library} arrays"
    if not installed():
        return "needs numba, which is not installed (pip install numba)"
    import jax

    if jax.default_backend() != "cpu":
        return f"needs JAX's CPU backend; got {jax.default_backend()}"
    return None


def run(plan: Plan) -> tuple[Array, ...]:
    """Each array rotated by the compiled CPU kernel, called by XLA (an FFI custom call,
    which XLA cannot fuse into fused multiply-adds): NumPy's bits under ``jax.jit``.

    The tables, gathered in the graph, are broadcast against ``x`` with a size-1 heads
    axis and ``pairs`` entries last. One primitive, linear in ``x``: its transpose
    (``grad``) is the rotation by the other angle, ``vmap`` adds leading axes, and sharded
    operands are rotated shard by shard
    (:func:`jax.experimental.custom_partitioning.custom_partitioning`).
    """
    import jax.numpy as jnp

    cos, sin, _, _ = plan.tables
    heads = -3 if plan.axes.layout == "bhsd" else -2
    flags = {"interleaved": plan.interleaved, "inverse": plan.inverse, "heads": heads}
    results = []
    for x in plan.arrays:
        shape = tuple(1 if axis == x.ndim + heads else n for axis, n in enumerate(x.shape[:-1]))
        c, s = (jnp.broadcast_to(t, (*shape, t.shape[-1])) for t in (cos, sin))
        results.append(_primitive().bind(x, c, s, **flags))
    return tuple(results)


@functools.cache
def _primitive() -> Any:
    """The rotation primitive, defined on first use (with its rules)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.custom_partitioning import custom_partitioning
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    from .numba_cpu.xla import register

    rotate = Primitive("anyrope_rotate")

    def call(x: Any, cos: Any, sin: Any, interleaved: bool, inverse: bool) -> Any:
        target, _ = register(interleaved, x.dtype.name)
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.ffi.ffi_call(target, out)(x, cos, -sin if inverse else sin)

    @functools.cache
    def partitioned(interleaved: bool, inverse: bool, heads: int, rank: int) -> Any:
        def local(x: Any, cos: Any, sin: Any) -> Any:
            return call(x, cos, sin, interleaved, inverse)

        spread = custom_partitioning(local)

        def partition(mesh: Any, arguments: Any, result: Any) -> Any:
            # The last axis stays whole; the tables follow x except on their heads axis.
            spec = (*arguments[0].sharding.spec, *(None,) * rank)[: rank - 1]
            table = tuple(None if axis == rank + heads else a for axis, a in enumerate(spec))
            on = jax.NamedSharding(mesh, jax.P(*spec, None))
            tables = jax.NamedSharding(mesh, jax.P(*table, None))
            return mesh, local, on, (on, tables, tables)

        names = [f"a{axis}" for axis in range(rank - 1)]
        table_names = ["h" if axis == rank + heads else n for axis, n in enumerate(names)]
        x_rule, t_rule = " ".join([*names, "d"]), " ".join([*table_names, "p"])
        spread.def_partition(
            partition,
            sharding_rule=f"{x_rule}, {t_rule}, {t_rule} -> {x_rule}",
            need_replication_factors=("d", "p"),
        )
        return spread

    def lower(context: Any, *values: Any, interleaved: bool, inverse: bool, heads: int) -> Any:
        # A computation lowered for no particular devices, or for one, is not partitioned.
        devices = getattr(context.module_context.axis_context, "device_assignment", ())
        if devices is None or len(devices) == 1:
            function = functools.partial(call, interleaved=interleaved, inverse=inverse)
        else:
            function = partitioned(interleaved, inverse, heads, context.avals_in[0].ndim)
        return mlir.lower_fun(function, multiple_results=False)(context, *values)

    from jax._src import dispatch

    # As for custom_partitioning's own primitive: lowered knowing the devices.
    dispatch.prim_requires_devices_during_lowering.add(rotate)
    rotate.def_impl(functools.partial(dispatch.apply_primitive, rotate))
    rotate.def_abstract_eval(lambda x, cos, sin, **params: x)
    mlir.register_lowering(rotate, lower, platform="cpu")

    def transpose(
        cotangent: Any, x: Any, cos: Any, sin: Any, *, inverse: bool, **params: Any
    ) -> Any:
        if type(cotangent) is ad.Zero:
            return cotangent, None, None
        return rotate.bind(cotangent, cos, sin, inverse=not inverse, **params), None, None

    def batch(arguments: Any, dims: Any, **params: Any) -> Any:
        # The kernel takes any leading axes: the mapped one goes first, in every operand.
        size = next(a.shape[d] for a, d in zip(arguments, dims, strict=True) if d is not None)
        moved = [
            jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
            for a, d in zip(arguments, dims, strict=True)
        ]
        return rotate.bind(*moved, **params), 0

    # Linear in x; the tables are constants.
    ad.defjvp(
        rotate, lambda t, x, cos, sin, **params: rotate.bind(t, cos, sin, **params), None, None
    )
    ad.primitive_transposes[rotate] = transpose
    batching.primitive_batchers[rotate] = batch
    return rotate
