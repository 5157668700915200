"""The public boundary's pipeline: validate, build tables, pick a path, rotate.

:class:`anyrope.RoPE` and the functional :func:`anyrope.rotate` / :func:`anyrope.rotate_qk`
all end here, so every entry point checks the same things and dispatches the same way.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import array_api_compat
import numpy as np

from ._agnostic.rotation import rotate_pairs
from ._cpu import blocked
from ._cuda.launch import rotate_cuda
from ._cuda.launch import unsupported_reason as cuda_unsupported
from ._cuda.launch import usable as cuda_usable
from ._layout import Axes, axes_of, place_tables
from ._mrope import join_sections
from ._namespace import (
    Array,
    Namespace,
    device_of,
    is_real_floating,
    library_name,
    namespace_of,
    table_dtype,
    to_host,
)
from ._packed import packed_positions
from ._positions import Positions
from ._validation import check_bool, check_impl, describe

if TYPE_CHECKING:
    from ._rope import RoPE


def apply(
    rope: RoPE,
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    *,
    layout: str,
    inverse: bool,
    inplace: bool,
    impl: str,
    xp: Namespace | None,
    cu_seqlens: object = None,
) -> tuple[Array, ...]:
    """Rotate each of ``arrays`` (q and k, or one x) with the tables of ``rope``."""
    xp = namespace_of(*arrays, xp=xp, argument=" and ".join(names))
    check_bool(inverse, "inverse")
    check_bool(inplace, "inplace")
    check_impl(impl)
    if layout == "thd":
        # A packed batch is one sequence whose positions restart at each cu_seqlens entry.
        positions = packed_positions(cu_seqlens, positions, x=arrays[0], xp=xp)
        layout = "bshd"
    elif cu_seqlens is not None:
        raise ValueError(f"`cu_seqlens` needs layout='thd'; got layout={layout!r}")
    axes = [_check_input(x, name, rope, layout, xp) for x, name in zip(arrays, names, strict=True)]
    _check_same_tokens(arrays, names, axes)
    if array_api_compat.is_jax_array(arrays[0]) and not inplace and impl in ("auto", "array_api"):
        from ._jax import back_to_jax, on_host

        host = on_host(arrays, positions)
        if host is not None:
            host_arrays, host_positions = host
            results = apply(
                rope,
                host_arrays,
                names,
                host_positions,
                layout=layout,
                inverse=inverse,
                inplace=False,
                impl=impl,
                xp=None,
            )
            return back_to_jax(results, like=arrays)
    if array_api_compat.is_dask_array(arrays[0]):
        from ._dask import rotate_dask

        return rotate_dask(
            rope, arrays, positions, axes[0], inverse=inverse, inplace=inplace, impl=impl
        )
    first, first_axes = arrays[0], axes[0]
    rope, where = rope._resolve(positions, xp, first, first_axes)
    path = _choose_path(impl, arrays, inplace, xp)
    if any(math.prod(x.shape) == 0 for x in arrays):
        return tuple(x if inplace else xp.asarray(x, copy=True) for x in arrays)
    # inf * 0 is NaN and a huge pair may overflow: IEEE results the contract keeps
    # (numerics.md, section 4), not something to warn about on NumPy and not elsewhere.
    with np.errstate(invalid="ignore", over="ignore"):
        return _rotate(
            rope,
            arrays,
            where,
            axes=first_axes,
            path=path,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            xp=xp,
        )


def _rotate(
    rope: RoPE,
    arrays: tuple[Array, ...],
    where: Positions | list[Positions],
    *,
    axes: Axes,
    path: str,
    layout: str,
    inverse: bool,
    inplace: bool,
    xp: Namespace,
) -> tuple[Array, ...]:
    first = arrays[0]
    if path == "cuda" and isinstance(where, Positions):
        return rotate_cuda(
            rope, arrays, where, layout=layout, inverse=inverse, inplace=inplace, xp=xp
        )

    # Tables are rounded once to the compute dtype (numerics.md): no cast on the device.
    device, dtype = device_of(first), table_dtype(xp, first.dtype)
    if isinstance(where, Positions):
        cos, sin = gather_tables(rope, where, xp, device, dtype)
    else:
        assert rope.sections is not None
        cos, sin = join_sections(
            [gather_tables(rope, stream, xp, device, dtype) for stream in where], rope.sections, xp
        )
    cos, sin = place_tables(cos, axes, xp), place_tables(sin, axes, xp)
    r, interleaved = rope.rotary_dim, rope.interleaved
    results = []
    for x in arrays:
        if path == "blocked":
            out = x if inplace else _empty_like(x)
            results.append(
                blocked.rotate_blocked(
                    x, cos, sin, rotary_dim=r, interleaved=interleaved, inverse=inverse, out=out
                )
            )
            continue
        y = rotate_pairs(x, cos, sin, rotary_dim=r, interleaved=interleaved, inverse=inverse, xp=xp)
        if inplace:
            x[...] = y
            y = x
        results.append(y)
    return tuple(results)


def gather_tables(
    rope: RoPE, where: Positions, xp: Namespace, device: Any, dtype: Any
) -> tuple[Array, Array]:
    """cos/sin of shape ``(*batch', seq, rotary_dim // 2)`` (``(seq, pairs)`` for a range)."""
    cache = rope._cache
    if where.array is None:
        if not cache.cacheable(where.stop):
            return cache.build(
                np.arange(where.offset, where.stop, dtype=np.int64), xp, device, dtype
            )
        cos, sin = cache.get(where.stop, xp, device, dtype)
        return cos[where.offset : where.stop, ...], sin[where.offset : where.stop, ...]
    if where.traced:
        from ._jax import traced_tables

        return traced_tables(cache, where.array, dtype, rope.rotary_dim // 2)
    if not cache.cacheable(where.stop):
        return cache.build(to_host(where.array).astype(np.int64), xp, device, dtype)
    cos, sin = cache.get(where.stop, xp, device, dtype)
    flat = xp.reshape(where.array, (-1,))
    shape = (*where.array.shape, rope.rotary_dim // 2)
    return (
        xp.reshape(xp.take(cos, flat, axis=0), shape),
        xp.reshape(xp.take(sin, flat, axis=0), shape),
    )


def _check_input(x: Array, name: str, rope: RoPE, layout: str, xp: Namespace) -> Axes:
    if not is_real_floating(xp, x.dtype):
        raise TypeError(
            f"`{name}` must have a real floating dtype (float16, bfloat16, float32 or float64); "
            f"got {x.dtype}"
        )
    axes = axes_of(x, layout, name)
    if axes.head_dim != rope.head_dim:
        raise ValueError(
            f"`{name}` must have head_dim={rope.head_dim} in its last axis; got {describe(x)}"
        )
    return axes


def _check_same_tokens(arrays: tuple[Array, ...], names: tuple[str, ...], axes: list[Axes]) -> None:
    first, first_axes = arrays[0], axes[0]
    for x, name, x_axes in zip(arrays[1:], names[1:], axes[1:], strict=True):
        if x.dtype != first.dtype:
            raise TypeError(
                f"`{name}` must have the dtype of `{names[0]}` ({first.dtype}); got {x.dtype}"
            )
        if str(device_of(x)) != str(device_of(first)):
            raise ValueError(
                f"`{name}` must be on the device of `{names[0]}` ({device_of(first)}); "
                f"got {device_of(x)}"
            )
        if (x_axes.batch, x_axes.seq) != (first_axes.batch, first_axes.seq):
            raise ValueError(
                f"`{name}` must share the batch and sequence axes of `{names[0]}` "
                f"(batch {first_axes.batch}, seq {first_axes.seq}); "
                f"got batch {x_axes.batch}, seq {x_axes.seq}"
            )


def _choose_path(impl: str, arrays: tuple[Array, ...], inplace: bool, xp: Namespace) -> str:
    if impl in ("auto", "cuda"):
        if cuda_usable(arrays):
            return "cuda"
        if impl == "cuda":
            raise ValueError(cuda_unsupported(arrays))
    fast = all(blocked.supports(x) for x in arrays)
    if impl == "blocked" and not fast:
        raise ValueError(
            "`impl`='blocked' needs NumPy arrays or PyTorch CPU tensors; "
            f"got {library_name(xp)} arrays on device {device_of(arrays[0])}"
        )
    if inplace:
        _check_writable(arrays, xp)
    if impl == "array_api" or not fast:
        return "array_api"
    if array_api_compat.is_torch_array(arrays[0]) and _needs_grad(arrays):
        if impl == "blocked":
            raise ValueError(
                "`impl`='blocked' does not record autograd; use impl='auto' or 'array_api' "
                "for tensors that require grad"
            )
        return "array_api"
    return "blocked"


def _needs_grad(arrays: tuple[Array, ...]) -> bool:
    import torch

    return torch.is_grad_enabled() and any(x.requires_grad for x in arrays)


def _check_writable(arrays: tuple[Array, ...], xp: Namespace) -> None:
    if array_api_compat.is_jax_array(arrays[0]):
        raise ValueError("`inplace`=True is not possible for JAX arrays, which are immutable")
    for x in arrays:
        if hasattr(x, "flags") and not x.flags.writeable:
            raise ValueError(f"`inplace`=True needs writable arrays; got a read-only {describe(x)}")


def _empty_like(x: Array) -> Array:
    if array_api_compat.is_torch_array(x):
        # NumPy asks Linux for transparent huge pages on large allocations and PyTorch's
        # CPU allocator does not: the first touch of a fresh output then cost as much as
        # the rotation itself. The bytes come from NumPy, the tensor views them.
        import torch

        storage = np.empty(x.numel() * x.element_size(), dtype=np.uint8)
        return torch.from_numpy(storage).view(x.dtype).view(x.shape)
    return np.empty_like(x, order="C")
