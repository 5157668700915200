"""One rotation: plan it, pick a path, run it.

``rotate(source, arrays, ...)`` is what :class:`anyrope.RoPE` and the lazy libraries
(:mod:`anyrope._lazy.dask`, per block) call: :func:`anyrope._plan.make_plan` checks
everything once, :func:`anyrope._paths.choose` picks the path ``impl`` names (or the
first that takes the plan), and the path rotates.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from types import ModuleType
from typing import Any

import array_api_compat
import numpy as np

from ._namespace import Array, Namespace, namespace_of
from ._offsets import Offsets
from ._paths import choose
from ._plan import Plan, make_plan
from ._tables import TableSource
from ._validation import check_bool


def rotate(
    source: TableSource,
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    *,
    head_dim: int,
    interleaved: bool,
    layout: str,
    inverse: bool,
    inplace: bool,
    impl: str,
    xp: Namespace | None,
    cu_seqlens: object = None,
    adjoint: bool = False,
) -> tuple[Array, ...]:
    """Rotate each of ``arrays`` (q and k, or one x) with the tables of ``source``.

    ``adjoint`` gives the transpose of the rotation asked for (autograd's backward; see
    :func:`~anyrope._plan.make_plan`).

    A call whose geometry was seen before (libraries, shapes, dtypes, devices, the kind of
    positions and every option) reuses that call's plan and path: only what depends on
    the values is checked again (the positions, and memory overlap in place).
    """
    # Checked before the plan cache is asked: its keys take 1 for True and 0 for False.
    check_bool(inverse, "inverse")
    check_bool(inplace, "inplace")
    key = None
    if cu_seqlens is None:  # packed positions come from its values: planned anew
        key = _geometry(
            arrays,
            positions,
            head_dim,
            interleaved,
            layout,
            inverse,
            inplace,
            impl,
            xp,
            cu_seqlens,
            adjoint,
        )
    known, key = _known(source, key)
    if known is not None:
        plan, path = known
        return _run(path, plan.for_call(arrays, positions))
    options = {
        "head_dim": head_dim,
        "interleaved": interleaved,
        "layout": layout,
        "inverse": inverse,
        "inplace": inplace,
        "xp": xp,
        "cu_seqlens": cu_seqlens,
        "adjoint": adjoint,
    }
    host = _jax_on_host(arrays, names, positions, cu_seqlens, xp=xp, inplace=inplace, impl=impl)
    if host is not None:
        from ._jax import back_to_jax

        host_arrays, host_positions, host_cu_seqlens = host
        try:
            results = rotate(
                source,
                host_arrays,
                names,
                host_positions,
                **{**options, "xp": None, "cu_seqlens": host_cu_seqlens},  # type: ignore[arg-type]
                impl=impl,
            )
        except (TypeError, ValueError):
            # The checks described the NumPy views: say it again of the caller's arrays.
            _raise_for(source, arrays, names, positions, options)
            raise
        return back_to_jax(results, like=arrays)
    if any(isinstance(x, np.ndarray) and not x.dtype.isnative for x in arrays):
        return _in_native_order(source, arrays, names, positions, impl=impl, options=options)
    plan = make_plan(source, arrays, names, positions, **options)  # type: ignore[arg-type]
    path = choose(impl, plan)
    # A symbolic dimension (None) is not known to be empty.
    full = [0 not in x.shape for x in plan.arrays]
    if all(full):
        if key is not None and len(plan.where) == 1:
            source.remember(key, (plan.template(), path))
        return _run(path, plan)
    rotated = iter(())
    if any(full):
        subset = plan.with_arrays(
            tuple(x for x, f in zip(arrays, full, strict=True) if f),
            tuple(n for n, f in zip(names, full, strict=True) if f),
        )
        rotated = iter(_run(path, subset))
    return tuple(
        next(rotated) if f else (x if inplace else plan.xp.asarray(x, copy=True))
        for x, f in zip(plan.arrays, full, strict=True)
    )


def _raise_for(
    source: TableSource,
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    options: dict[str, object],
) -> None:
    """Raise the error :func:`make_plan` finds in these arguments, if any."""
    try:
        make_plan(source, arrays, names, positions, **options)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise error from None


def _in_native_order(
    source: TableSource,
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    *,
    impl: str,
    options: dict[str, object],
) -> tuple[Array, ...]:
    """Rotate NumPy arrays of a non-native byte order (``>f4`` on a little-endian
    machine): the bits of the same values in native order, in the caller's dtype.

    The paths and the tables read native memory only: the arrays are rotated as native
    copies, after every check on the caller's arrays (in place: written back).
    """
    make_plan(source, arrays, names, positions, **options)  # type: ignore[arg-type]
    native = tuple(x.astype(x.dtype.newbyteorder("=")) for x in arrays)
    results = rotate(
        source,
        native,
        names,
        positions,
        impl=impl,
        **{**options, "inplace": False},  # type: ignore[arg-type]
    )
    if not options["inplace"]:
        return tuple(y.astype(x.dtype, copy=False) for x, y in zip(arrays, results, strict=True))
    for x, y in zip(arrays, results, strict=True):
        x[...] = y
    return arrays


def rotate_each(
    sources: tuple[TableSource, ...],
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    *,
    head_dim: int,
    interleaved: bool,
    layout: str,
    inverse: bool,
    inplace: bool,
    impl: str,
    xp: Namespace | None,
    cu_seqlens: object = None,
) -> tuple[Array, ...]:
    """Rotate ``arrays[j]`` with the tables of ``sources[j]`` (xPos: queries and keys
    have amplitudes of their own), the arguments checked together as :func:`rotate`
    checks them (same dtype, device and tokens; in place, separate memory).

    Each array then takes :func:`rotate` with its own source, so every path, and its
    plan cache, serves it unchanged. A geometry checked before is checked again only
    where values matter (the positions, and memory overlap in place).
    """
    check_bool(inverse, "inverse")
    check_bool(inplace, "inplace")
    options = {
        "head_dim": head_dim,
        "interleaved": interleaved,
        "layout": layout,
        "inverse": inverse,
        "inplace": inplace,
        "xp": xp,
        "cu_seqlens": cu_seqlens,
    }
    if len(arrays) > 1:
        _check_together(sources[0], arrays, names, positions, impl=impl, options=options)
    return tuple(
        rotate(source, (x,), (name,), positions, impl=impl, **options)[0]  # type: ignore[arg-type]
        for source, x, name in zip(sources, arrays, names, strict=True)
    )


def _check_together(
    source: TableSource,
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    *,
    impl: str,
    options: dict[str, object],
) -> None:
    """What :func:`make_plan` checks of several arrays, remembered by geometry as
    :func:`rotate` remembers its plans."""
    geometry = None
    if options["cu_seqlens"] is None:
        geometry = _geometry(arrays, positions, *options.values(), impl)
    known, key = _known(source, None if geometry is None else ("together", geometry))
    if known is not None:
        known.for_call(arrays, positions)
        return
    plan = make_plan(source, arrays, names, positions, **options)  # type: ignore[arg-type]
    if key is not None and len(plan.where) == 1:
        source.remember(key, plan.template())


def _run(path: ModuleType, plan: Plan) -> tuple[Array, ...]:
    return path.run(plan)  # type: ignore[no-any-return]


def _geometry(arrays: tuple[Array, ...], positions: object, *options: object) -> Hashable | None:
    """What a plan depends on besides the values (options, and the shapes, strides, dtypes
    and devices of the arrays): ``None`` when a call is not worth remembering (other
    libraries, autograd, positions other than None, int or an array)."""
    parts: list[object] = [*options]
    for x in arrays:
        part = _array_geometry(x)
        if part is None:
            return None
        parts.append(part)
    if positions is None or type(positions) is int:
        parts.append(type(positions))
    else:
        part = _array_geometry(positions)
        if part is None:
            return None
        parts.append(part)
    return tuple(parts)


def _known(source: TableSource, key: Hashable | None) -> tuple[Any, Hashable | None]:
    """The plan (and path) kept for ``key``, and the key, ``None`` when it cannot be kept."""
    if key is None:
        return None, None
    try:
        return source.plans.get(key), key
    except TypeError:  # an unhashable option: checked, and refused, by make_plan
        return None, None


def _array_geometry(x: Any) -> Hashable | None:
    kind = type(x)
    if kind is np.ndarray:
        return (np.ndarray, x.shape, x.strides, x.dtype)
    # torch.Tensor itself, asked without importing torch; its subclasses (Parameter,
    # FakeTensor), other layouts (sparse tensors have no strides) and tensors with the
    # negative bit (whose memory holds -x) are planned, and refused or resolved where
    # make_plan does, at every call.
    if (
        kind.__name__ == "Tensor"
        and kind.__module__ == "torch"
        and not x.requires_grad
        and x.layout is sys.modules["torch"].strided
        and not x.is_neg()
    ):
        return (kind, x.shape, x.stride(), x.dtype, x.device)
    return None


def path_name(
    source: TableSource,
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    *,
    impl: str,
    **options: object,
) -> str:
    """The ``impl`` name of the path that :func:`rotate` would take for these arguments."""
    host = _jax_on_host(
        arrays,
        names,
        positions,
        options.get("cu_seqlens"),
        xp=options.get("xp"),
        inplace=options["inplace"],
        impl=impl,
    )
    if host is not None:
        arrays, positions, cu_seqlens = host
        options = {**options, "xp": None, "cu_seqlens": cu_seqlens}
    plan = make_plan(source, arrays, names, positions, **options)  # type: ignore[arg-type]
    return str(choose(impl, plan).NAME)


def _jax_on_host(
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    cu_seqlens: object,
    *,
    xp: Namespace | None,
    inplace: object,
    impl: str,
) -> tuple[tuple[Array, ...], object, object] | None:
    """NumPy views for eager JAX arrays on the CPU, which XLA would flush to zero when
    subnormal; ``None`` for everything else."""
    if not array_api_compat.is_jax_array(arrays[0]) or inplace or impl not in ("auto", "array_api"):
        return None
    # The views are planned without `xp`, and each array is asked for its devices.
    namespace_of(*arrays, xp=xp, argument=names)
    from ._jax import on_host

    if not isinstance(positions, Offsets):
        return on_host(arrays, positions, cu_seqlens)
    host = on_host(arrays, positions.values, cu_seqlens)
    if host is None:
        return None
    return host[0], Offsets(host[1]), host[2]
