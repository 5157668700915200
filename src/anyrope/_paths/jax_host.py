"""Eager JAX arrays on the CPU: rotated as NumPy views, the results put back on their
devices.

XLA's CPU backend flushes subnormal inputs and results to zero, even outside ``jit``
(jax-ml/jax#16200), which would break the numerical contract. Concrete arrays on the CPU
are therefore rotated by the NumPy path on zero-copy views: the same bits as every other
backend, and without compiling an XLA computation per operation and shape. Every other
JAX call (traced, on another device, in place, or with an ``impl`` of its own) is
rotated as it is, by the path that takes its plan (:mod:`.jax_cpu` or the reference).

It is one of the registry's routes (:data:`anyrope._paths.ROUTES`). It imports JAX only
for JAX arrays, when JAX is already in ``sys.modules``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat
import numpy as np

from .._call import Call
from .._namespace import Array, namespace_of
from .._offsets import Offsets
from .._plan import make_plan
from .._tables import TableSource

NAME = "jax host"
LIBRARY = "jax"


def takes(x: object) -> bool:
    """Whether ``x`` is a JAX array (or tracer): by its type alone, which
    :func:`anyrope._paths.route_of` keeps the answer for. array-api-compat also counts
    NumPy arrays of dtype ``jax.float0`` as JAX's, by their dtype: the paths refuse them
    as arrays of a dtype that is not a real floating one."""
    return type(x).__module__.startswith("jax") and bool(array_api_compat.is_jax_array(x))


def inner(call: Call) -> Call:
    """The call whose path rotates ``call``: :func:`on_host` of it, or itself."""
    return on_host(call) or call


def rotate(
    rotate_arrays: Callable[..., tuple[Array, ...]],
    sources: tuple[TableSource, ...],
    call: Call,
    *,
    head_dim: int,
    interleaved: bool,
) -> tuple[Array, ...]:
    """``rotate_arrays`` (the pipeline's) of :func:`inner` of ``call``, the NumPy results
    put back on the devices of the caller's arrays."""
    geometry: dict[str, Any] = {"head_dim": head_dim, "interleaved": interleaved}
    host = on_host(call)
    if host is None:
        return rotate_arrays(sources, call, **geometry)
    try:
        results = rotate_arrays(sources, host, **geometry)
    except (TypeError, ValueError) as error:
        # The checks described the NumPy views: say it again of the caller's arrays.
        try:
            make_plan(sources[0], call, **geometry)
        except (TypeError, ValueError) as again:
            raise again from None
        raise error from None
    import jax

    return tuple(jax.device_put(y, x.sharding) for y, x in zip(results, call.arrays, strict=True))


_NUMPY_IMPLS = ("auto", "array_api", "numba", "blocked")
"""The ``impl`` values the NumPy route takes: those of NumPy arrays (what
:meth:`anyrope.RoPE.path` names for an eager JAX CPU array)."""


def on_host(call: Call) -> Call | None:
    """``call`` on NumPy views of its concrete JAX CPU arrays, which XLA would flush to
    zero when subnormal, and of its positions (or :class:`~anyrope.Offsets` of them) and
    ``cu_seqlens``, planned without ``xp``; ``None`` for everything else.

    ``None`` in place, for an ``impl`` other than the NumPy route's, or when anything
    is traced, lives on another device, or the positions or ``cu_seqlens`` are an array
    of another library (the JAX path then says so).
    """
    arrays, positions = call.arrays, call.positions
    if call.inplace or call.impl not in _NUMPY_IMPLS:
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
