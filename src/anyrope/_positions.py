"""Positions: None, an offset, Offsets, or an integer array broadcasting to (*batch, seq)."""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import array_api_compat
import numpy as np

from ._jax import has_int64, is_traced
from ._namespace import Array, Namespace, device_of, dtype_name, library_name, to_host
from ._offsets import Offsets
from ._validation import MAX_POSITION, describe


class Positions(NamedTuple):
    """Validated positions for one call (a named tuple: made once per call, cheaply).

    Either a contiguous range ``offset .. offset + seq - 1`` (``array is None``), or an
    integer ``array`` of rank ``len(batch) + 1`` (padded with leading size-1 axes) whose
    shape broadcasts to ``(*batch, seq)``. ``stop`` is one past the largest position.
    ``traced``: a JAX array traced under ``jit``, whose values (and ``stop``) are not known
    until it runs (see ``_jax.py``). ``unread``: a device array whose values were not
    read on the host (that would wait for the device); ``stop`` is then the number of
    table rows it may index, and a path either checks the values where it reads them
    (the CUDA kernel) or has them read first (:func:`read`).
    """

    offset: int
    seq: int
    array: Array | None
    stop: int
    traced: bool = False
    unread: bool = False


def resolve_positions(
    positions: object,
    xp: Namespace,
    x: Array,
    batch: tuple[int, ...],
    seq: int,
    *,
    unread_bound: int | None = None,
) -> Positions:
    """Check ``positions`` against an input with batch axes ``batch`` and ``seq`` tokens.

    A 0-d integer array (or a NumPy integer scalar) is an offset, like a Python int: the
    positions ``offset .. offset + seq - 1`` for every batch row; a traced one (under
    ``jax.jit``) too. Arrays of any integer dtype are accepted; those other than int32
    and int64 are range-checked on the host and converted to int64, which every library
    can index with (see :func:`_indexable`). With ``unread_bound``,
    an int32 or int64 array on a GPU is left unread (``Positions.unread``) and may index
    that many table rows; so is an array whose values cannot be read on the host
    (traced, lazy or captured: :func:`host_readable`), gathered inside the graph
    (:func:`~anyrope._tables.gather_rows`).
    """
    # A symbolic dimension (Axes) is None: no int, no arange, without an array.
    if getattr(positions, "ndim", 0) == 0 and seq is None:
        raise ValueError(
            "an input with a symbolic sequence length needs `positions` as an integer array "
            f"(the positions are not known without it); got {describe(positions)}"
        )
    if positions is None:
        return Positions(0, seq, None, seq)
    if isinstance(positions, bool):
        raise TypeError(
            f"`positions` must be None, an integer offset or an integer array; got {positions!r}"
        )
    if isinstance(positions, numbers.Integral):
        return offset_positions(int(positions), seq)
    if isinstance(positions, Offsets):
        return row_offsets(positions.values, xp, x, batch, seq, unread_bound=unread_bound)
    if not array_api_compat.is_array_api_obj(positions) or isinstance(positions, (list, tuple)):
        raise TypeError(
            "`positions` must be None, an integer offset or an integer array; "
            f"got {type(positions).__name__}"
        )
    check_integer_array(positions, "positions", xp, x)
    array: Array = positions
    if array.ndim == 0:
        if not is_traced(array) and host_readable(array):
            return offset_positions(int(to_host(array)), seq)
        array = _indexable(xp.reshape(array, (1,)), xp, None)
        array = array + xp.arange(seq, dtype=array.dtype, device=device_of(array))
    return _resolve_array(array, xp, batch, seq, unread_bound)


def host_readable(values: Array) -> bool:
    """Whether the values of ``values`` can be read on the host: not a traced JAX array,
    a torch tensor of a subclass (a FakeTensor, a wrapper that refuses host reads while a
    CUDA graph is captured) nor a lazy array (ndonnx graph inputs; see
    :func:`array_api_compat.is_lazy_array`). A GPU array is readable, at the cost of a wait."""
    kind = type(values)
    if kind is np.ndarray:
        return True
    if array_api_compat.is_torch_array(values):
        return kind.__module__ == "torch" and kind.__name__ == "Tensor"
    if array_api_compat.is_jax_array(values):
        return not is_traced(values)
    return not array_api_compat.is_lazy_array(values)


def host_positions(values: Array) -> np.ndarray[Any, Any]:
    """The values of concrete positions on the host as int64, checked to lie in
    ``[0, 2**53)`` in their own dtype (as int64, a uint64 above 2**63 would wrap)."""
    host = to_host(values)
    if host.size and (host.min() < 0 or host.max() >= MAX_POSITION):
        raise ValueError(
            f"`positions` must lie in [0, 2**53); got values in [{host.min()}, {host.max()}]"
        )
    return host.astype(np.int64)


def waits_for_device(values: Array) -> bool:
    """Whether reading ``values`` on the host waits for a device (CuPy, torch on a GPU)."""
    # By module, without importing either library (asked at every call).
    library = type(values).__module__.partition(".")[0]
    if library == "cupy":
        return True
    return library == "torch" and values.device.type != "cpu"


def offset_positions(offset: int, seq: int) -> Positions:
    """The positions ``offset .. offset + seq - 1``, checked."""
    if offset < 0:
        raise ValueError(f"`positions` offset must be non-negative; got {offset}")
    if offset + seq > MAX_POSITION:
        raise ValueError(
            f"`positions` offset {offset} plus seq={seq} exceeds 2**53, beyond which "
            "float64 cannot represent every position"
        )
    return Positions(offset, seq, None, offset + seq)


def row_offsets(
    values: Array,
    xp: Namespace,
    x: Array,
    batch: tuple[int, ...],
    seq: int,
    *,
    unread_bound: int | None = None,
) -> Positions:
    """The positions ``values[..., None] + 0 .. seq-1`` of per-row :class:`Offsets`.

    ``values`` must broadcast to the batch axes ``batch``. Their lowest and highest row
    are checked on the host, once: the array built from them needs no other check. The
    sum is taken in a dtype that holds every position (:func:`_indexable`), whatever
    integer dtype the offsets have. With ``unread_bound``, offsets that a positions
    array of the same kind would leave unread are not read either.
    """
    check_integer_array(values, "positions", xp, x)
    shape = tuple(values.shape)
    padded = (1,) * (len(batch) - len(shape)) + shape
    if len(shape) > len(batch) or any(n not in (1, b) for n, b in zip(padded, batch, strict=True)):
        raise ValueError(
            f"`positions`=Offsets(...) holds one offset per batch row: its shape must broadcast "
            f"to the batch axes {batch}; got shape {shape}"
        )
    traced = is_traced(values)
    # Left unread as a positions array is (see _resolve_array): gathered in the graph.
    unread = unread_bound is not None and (
        not host_readable(values)
        or (waits_for_device(values) and dtype_name(values.dtype) in _INDEX_DTYPES)
    )
    stop = 0
    if not (traced or unread) and math.prod(shape) != 0:
        host = to_host(values)
        # The lowest and the highest row are checked as an int offset would be.
        offset_positions(int(host.min()), seq)
        highest = offset_positions(int(host.max()), seq)
        stop = highest.stop if seq else 0  # no token, no position
    values = _indexable(values, xp, None if traced or unread else stop)
    steps = xp.arange(seq, dtype=values.dtype, device=device_of(values))
    rows = xp.reshape(values, (*padded, 1)) + steps
    if unread:
        return Positions(0, seq, rows, unread_bound or 0, traced=traced, unread=True)
    return Positions(0, seq, rows, stop, traced=traced)


def check_integer_array(values: Array, name: str, xp: Namespace, x: Array) -> None:
    """Check that ``values`` is an integer array of the input's library and device.

    The devices are compared only when both are known: a JAX array traced by a
    transformation has none, and a concrete array used inside it is a constant.
    """
    if not array_api_compat.is_array_api_obj(values) or isinstance(values, (list, tuple)):
        raise TypeError(
            f"`{name}` must be an array of the same library as the input ({library_name(xp)}); "
            f"got {type(values).__name__}"
        )
    try:
        values_xp = array_api_compat.array_namespace(values)
    except TypeError:
        values_xp = None
    if values_xp is None or library_name(values_xp) != library_name(xp):
        raise TypeError(
            f"`{name}` must be an array of the same library as the input ({library_name(xp)}); "
            f"got {describe(values)}"
        )
    if not (is_traced(values) or is_traced(x)):
        here, there = device_of(values), device_of(x)
        if str(here) != str(there):
            raise ValueError(f"`{name}` must be on the input's device {there}; got device {here}")
    if not xp.isdtype(values.dtype, "integral"):
        raise TypeError(f"`{name}` must have an integer dtype; got {values.dtype}")


def _resolve_array(
    p: Array, xp: Namespace, batch: tuple[int, ...], seq: int, unread_bound: int | None
) -> Positions:
    target = (*batch, seq)
    if p.ndim > len(target):
        raise ValueError(
            f"`positions` must have shape (seq,) or (*batch, seq) with at most {len(target)} axes "
            f"for an input with batch axes {batch} and seq={seq}; got shape {tuple(p.shape)}"
        )
    padded = (1,) * (len(target) - p.ndim) + tuple(p.shape)
    if any(n not in (1, t) for n, t in zip(padded, target, strict=True)):
        raise ValueError(
            f"`positions` of shape {tuple(p.shape)} does not broadcast to (*batch, seq)={target}"
        )
    if p.ndim < len(padded):
        p = xp.reshape(p, padded)
    if is_traced(p):
        # Gathered in the graph where the tables have a size, else by a host callback.
        rows = unread_bound or 0
        return Positions(0, seq, _indexable(p, xp, None), rows, traced=True, unread=bool(rows))
    if not host_readable(p):
        # make_plan refuses them without unread_bound.
        return Positions(0, seq, _indexable(p, xp, None), unread_bound or 0, unread=True)
    if (
        unread_bound is not None
        and waits_for_device(p)
        and dtype_name(p.dtype) in _INDEX_DTYPES
        and math.prod(p.shape) != 0
    ):
        # On a GPU within the tables' rows: left unread, a wait for the device avoided.
        return Positions(0, seq, p, unread_bound, unread=True)
    return _checked(p, xp, seq)


def known_positions(
    positions: Array, xp: Namespace, batch: tuple[int, ...], seq: int, *, unread_bound: int | None
) -> Positions:
    """:func:`resolve_positions` for an integer array of the library, device, dtype and
    shape that an earlier call checked (the pipeline keeps plans by these): only its
    values are left to check, and none when the earlier call left them unread within
    ``unread_bound`` rows (which the same geometry does again)."""
    if positions.ndim == 0:
        return offset_positions(int(to_host(positions)), seq)
    lead = len(batch) + 1 - positions.ndim
    if lead:
        positions = positions.reshape((1,) * lead + tuple(positions.shape))
    if unread_bound is not None:
        return Positions(0, seq, positions, unread_bound, unread=True)
    return _checked(positions, xp, seq, ranges=True)


def _checked(p: Array, xp: Namespace, seq: int, *, ranges: bool = False) -> Positions:
    """Positions ``p`` (shaped) with their range checked on the host; with ``ranges``,
    the range ``offset .. offset + seq - 1`` when every row of ``p`` holds it."""
    stop = 0
    size = math.prod(p.shape)
    if size != 0:
        low, high = _extremes(p, xp, size)
        if low < 0:
            raise ValueError(f"`positions` must be non-negative; got a minimum of {low}")
        if high >= MAX_POSITION:
            raise ValueError(
                f"`positions` must be below 2**53, beyond which float64 cannot represent every "
                f"position; got a maximum of {high}"
            )
        stop = high + 1
        if ranges and high - low == seq - 1 and _consecutive(p, xp, seq):
            # A decode step's position_ids, or a prefill's arange: the paths slice the
            # tables as for an int offset instead of gathering rows.
            return Positions(low, seq, None, stop)
    return Positions(0, seq, _indexable(p, xp, stop), stop)


def _indexable(values: Array, xp: Namespace, stop: int | None) -> Array:
    """``values`` in an integer dtype every library indexes with, holding every position
    below ``stop`` (``None``: not known, for traced values).

    int64 stays; int32 stays when ``stop`` is known to fit it; any other dtype becomes
    int64, so that no sum of offsets and steps wraps. JAX without 64-bit types
    (``jax_enable_x64``) has no int64: its positions are int32, a known ``stop`` beyond
    int32 is refused, and a traced position that wraps is negative, which the host
    callback refuses when the compiled function runs.
    """
    name = dtype_name(values.dtype)
    if name == "int64" or (name == "int32" and stop is not None and stop <= _INT32_STOP):
        return values
    if library_name(xp) == "jax" and not has_int64():
        if stop is not None and stop > _INT32_STOP:
            raise ValueError(
                f"`positions` reach {stop - 1}, beyond int32, and JAX has no 64-bit integers "
                "unless jax_enable_x64 is set: set it, or pass the offset as an int"
            )
        return values if name == "int32" else xp.astype(values, xp.int32)
    return xp.astype(values, xp.int64)


def _extremes(p: Array, xp: Namespace, size: int) -> tuple[int, int]:
    """The lowest and the highest of the ``size`` positions ``p`` (not empty)."""
    # A NumPy array or a torch CPU tensor (asked without importing torch).
    if (
        size <= SMALL_POSITIONS
        and type(p).__module__ in ("numpy", "torch")
        and not waits_for_device(p)
    ):
        # Python ints cost less than two reductions through NumPy's or torch's dispatch:
        # a decode step has one position per row, most often the same one.
        if size == 1:
            value = p.item()
            return value, value
        values = p.ravel().tolist()
        if values.count(values[0]) == size:
            return values[0], values[0]
        return min(values), max(values)
    if dtype_name(p.dtype) in _INDEX_DTYPES:
        return int(xp.min(p)), int(xp.max(p))
    # Not every library reduces every integer type (torch has no min of uint16), and a
    # uint64 above 2**63 must be reported as itself, not wrapped.
    host = to_host(p)
    return int(host.min()), int(host.max())


def _consecutive(p: Array, xp: Namespace, seq: int) -> bool:
    """Whether every row of ``p``, whose values span ``seq`` integers, counts up by one:
    then every row starts at the lowest value."""
    if p.shape[-1] != seq:
        # One position per row, broadcast along the sequence: rows (b, 1) of [[0], [1]]
        # span two integers, yet each row holds one position, not a range.
        return False
    if seq == 1:
        return True
    # In a narrower or unsigned dtype a difference could wrap around to 1.
    if dtype_name(p.dtype) not in _INDEX_DTYPES:
        return False
    return bool(xp.all(p[..., 1:] - p[..., :-1] == 1))


_INDEX_DTYPES = ("int32", "int64")
"""Integer dtypes every library indexes with; other integer positions become int64."""
_INT32_STOP = 2**31
"""int32 holds every position below this."""

SMALL_POSITIONS = 64
"""Position arrays on the host up to this size (a decode step's) are read as Python ints."""
