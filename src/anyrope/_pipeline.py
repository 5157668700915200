"""One rotation: plan it, pick a path, run it.

``rotate_each(sources, call, ...)`` is what :class:`anyrope.RoPE` calls with a checked
:class:`~anyrope._call.Call`: :func:`anyrope._plan.make_plan` checks what its arrays
tell, :func:`anyrope._paths.choose` picks the path ``impl`` names (or the first that
takes the plan), :func:`anyrope._plan.with_tables` puts the tables that path reads in the
plan, and the path rotates. The arrays of a route's library (:data:`anyrope._paths.ROUTES`:
dask, eager JAX on the CPU) go to the route, which hands :func:`rotate_arrays` the arrays
a path takes (dask's blocks, NumPy views of JAX arrays).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._call import Call
from ._namespace import Array
from ._paths import Bound, Path, binder, choose, route_of
from ._plan import Plan, make_plan, with_tables
from ._tables import TableSource
from ._torch import forward_mode


def rotate(
    source: TableSource, call: Call, *, head_dim: int, interleaved: bool
) -> tuple[Array, ...]:
    """Rotate each array of ``call`` (q and k, or one x) with the tables of ``source``.

    A call whose geometry was seen before (libraries, shapes, dtypes, devices, the kind of
    positions and every option) reuses that call's plan and path: only what depends on
    the values is checked again (the positions, and memory overlap in place).
    """
    arrays, positions = call.arrays, call.positions
    known, key = _kept(source, call, head_dim, interleaved)
    if known is not None:
        if known.bound is not None:
            served: tuple[Array, ...] | None = known.bound(arrays, positions)
            if served is not None:
                return served
        planned = known.plan.for_call(arrays, positions, source, known.path.TABLES)
        return _run(known, planned, source)
    geometry: dict[str, Any] = {"head_dim": head_dim, "interleaved": interleaved}
    if any(isinstance(x, np.ndarray) and not x.dtype.isnative for x in arrays):
        return _in_native_order(source, call, geometry)
    plan = make_plan(source, call, **geometry)
    path = choose(call.impl, plan)
    # A symbolic dimension (None) is not known to be empty.
    full = [0 not in x.shape for x in plan.arrays]
    if all(full):
        planned = with_tables(plan, source, path.TABLES)
        if key is None:
            return path.run(planned)
        entry = Kept(plan.template(), path, binder(path))
        source.remember(key, entry)
        return _run(entry, planned, source)
    rotated = iter(())
    if any(full):  # those with elements, rotated as a call of their own
        kept = tuple(x for x, f in zip(arrays, full, strict=True) if f)
        names = tuple(n for n, f in zip(call.names, full, strict=True) if f)
        rotated = iter(rotate(source, call.on(kept, names), **geometry))
    return tuple(
        next(rotated) if f else (x if call.inplace else plan.xp.asarray(x, copy=True))
        for x, f in zip(plan.arrays, full, strict=True)
    )


@dataclass
class Kept:
    """What a table source keeps for the calls of one geometry: the plan without its
    arrays, its path, what binds the path's launches (:func:`anyrope._paths.binder`; None
    for a path that binds none), and what runs the next call with the tables of the last
    one, if the path bound any."""

    plan: Plan
    path: Path
    binder: Callable[[Plan], Bound | None] | None
    bound: Bound | None = None


def _run(kept: Kept, plan: Plan, source: TableSource) -> tuple[Array, ...]:
    """Run ``plan`` on the path ``kept`` holds, and bind its tables for the next call of
    its geometry (not where the tables depend on the length, so that a later call's
    positions may need others)."""
    results: tuple[Array, ...] = kept.path.run(plan)
    if kept.binder is not None and not source.depends_on_length:
        kept.bound = kept.binder(plan)
    return results


def _in_native_order(
    source: TableSource, call: Call, geometry: dict[str, Any]
) -> tuple[Array, ...]:
    """Rotate NumPy arrays of a non-native byte order (``>f4`` on a little-endian
    machine): the bits of the same values in native order, in the caller's dtype.

    The paths and the tables read native memory only: the arrays are rotated as native
    copies, after every check on the caller's arrays (in place: written back).
    """
    make_plan(source, call, **geometry)
    native = tuple(x.astype(x.dtype.newbyteorder("=")) for x in call.arrays)
    results = rotate(source, call._replace(arrays=native, inplace=False), **geometry)
    if not call.inplace:
        return tuple(
            y.astype(x.dtype, copy=False) for x, y in zip(call.arrays, results, strict=True)
        )
    for x, y in zip(call.arrays, results, strict=True):
        x[...] = y
    return call.arrays


def rotate_each(
    sources: tuple[TableSource, ...], call: Call, *, head_dim: int, interleaved: bool
) -> tuple[Array, ...]:
    """Rotate the ``j``-th array of ``call`` with the tables of ``sources[j]`` (xPos:
    queries and keys have amplitudes of their own), the arrays checked together as
    :func:`rotate` checks them (same dtype, device and tokens; in place, separate memory).

    Each array then takes :func:`rotate` with its own source, so every path, and its
    plan cache, serves it unchanged. A geometry checked before is checked again only
    where values matter (the positions, and memory overlap in place).
    """
    route = route_of(call.arrays[0])
    if route is not None:
        return route.rotate(
            rotate_arrays, sources, call, head_dim=head_dim, interleaved=interleaved
        )
    return rotate_arrays(sources, call, head_dim=head_dim, interleaved=interleaved)


def rotate_arrays(
    sources: tuple[TableSource, ...], call: Call, *, head_dim: int, interleaved: bool
) -> tuple[Array, ...]:
    """:func:`rotate_each` of arrays that a path takes (those a route hands back)."""
    if sources[0] is sources[-1]:  # one array, or q and k of one RoPE
        return rotate(sources[0], call, head_dim=head_dim, interleaved=interleaved)
    known, key = _kept(sources[0], call, "together", head_dim, interleaved)
    if known is not None:
        known.for_call(call.arrays, call.positions)
    else:
        plan = make_plan(sources[0], call, head_dim=head_dim, interleaved=interleaved)
        if key is not None:
            sources[0].remember(key, plan.template())
    return tuple(
        rotate(source, call.on((x,), (name,)), head_dim=head_dim, interleaved=interleaved)[0]
        for source, x, name in zip(sources, call.arrays, call.names, strict=True)
    )


def _kept(source: TableSource, call: Call, *geometry: object) -> tuple[Any, Hashable | None]:
    """The plan (and path) ``source`` keeps for calls of the geometry of ``call`` (and
    ``geometry``), and its key: ``None`` when such a call is not worth remembering
    (packed positions, which come from the values of ``cu_seqlens``; an array of
    position streams; other libraries, autograd, positions other than None, int or an
    array; an unhashable option, which make_plan refuses)."""
    positions = call.positions
    if call.cu_seqlens is not None:
        return None, None
    # An array of position streams (M-RoPE, axial; even of one stream) is taken apart by
    # make_plan only.
    if source.sections is not None and positions is not None and type(positions) is not int:
        return None, None
    # What a plan depends on besides the values: the options (layout to adjoint), and the
    # shapes, strides, dtypes and devices of the arrays and of the positions.
    parts: list[object] = [*geometry, *call[4:]]
    torch = sys.modules.get("torch")  # asked, never imported
    tensor, strided = (None, None) if torch is None else (torch.Tensor, torch.strided)
    for x in (*call.arrays, positions):
        kind = type(x)
        # NumPy arrays and torch.Tensor itself here, not in a helper: a call less per
        # array. Subclasses of torch.Tensor (Parameter, FakeTensor), other layouts
        # (sparse tensors have no strides) and tensors with the negative bit (whose
        # memory holds -x) are planned, and refused or resolved where make_plan does, at
        # every call.
        if kind is np.ndarray:
            part: object = (kind, x.shape, x.strides, x.dtype)
        elif kind is tensor:
            # Forward mode: a tangent that requires_grad does not show.
            if x.requires_grad or x.layout is not strided or x.is_neg() or forward_mode():
                return None, None
            part = (kind, x.shape, x.stride(), x.dtype, x.device)
        elif x is None or kind is int:
            part = kind
        else:
            part = _cupy_geometry(x)
            if part is None:
                return None, None
        parts.append(part)
    key = tuple(parts)
    try:
        return source.plans.get(key), key
    except TypeError:
        return None, None


def _cupy_geometry(x: Any) -> Hashable | None:
    kind = type(x)
    if kind.__name__ == "ndarray" and kind.__module__.partition(".")[0] == "cupy":
        return (kind, x.shape, x.strides, x.dtype, x.device.id)
    return None


def path_name(source: TableSource, call: Call, *, head_dim: int, interleaved: bool) -> str:
    """The ``impl`` name of the path that :func:`rotate_each` would take for ``call``
    (for a route's arrays, the path of the arrays it hands on)."""
    route = route_of(call.arrays[0])
    if route is not None:
        call = route.inner(call)
    plan = make_plan(source, call, head_dim=head_dim, interleaved=interleaved)
    return str(choose(call.impl, plan).NAME)
