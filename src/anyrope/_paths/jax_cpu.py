"""JAX arrays inside a trace (``jax.jit``, ``vmap``, ``grad``) on the CPU: the tables are
gathered in the graph, and XLA calls the numba kernel (:mod:`.numba_cpu.xla`) to rotate,
so the result has NumPy's bits. Eager JAX arrays on the CPU take the NumPy route before
a path is chosen (:mod:`anyrope._pipeline`); other JAX devices take the reference.
"""

from __future__ import annotations

from .._namespace import Array
from .._plan import Plan
from .numba_cpu import installed

NAME = "jax"


def rejects(plan: Plan) -> str | None:
    """JAX arrays for the CPU backend, when numba is installed."""
    if plan.library != "jax":
        return f"needs JAX arrays; got {plan.library} arrays"
    if not installed():
        return "needs numba, which is not installed (pip install numba)"
    import jax

    if jax.default_backend() != "cpu" or "cpu" not in str(plan.device or "cpu").lower():
        return f"needs JAX's CPU backend; got {jax.default_backend()}"
    return None


def run(plan: Plan) -> tuple[Array, ...]:
    """Each array rotated by one FFI call, with the tables gathered in the graph."""
    from .._jax import rotate_in_graph

    cos, sin = plan.gathered_tables()
    heads = -3 if plan.axes.layout == "bhsd" else -2
    return tuple(
        rotate_in_graph(x, cos, sin, interleaved=plan.interleaved, inverse=plan.inverse, heads=heads)
        for x in plan.arrays
    )
