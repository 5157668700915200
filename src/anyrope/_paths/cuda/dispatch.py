"""Dispatch to the RoPE kernel from CuPy arrays and PyTorch CUDA tensors.

Arrays reach the kernel as raw device pointers (``cupy.ndarray.data.ptr``,
``torch.Tensor.data_ptr()``) and strides: no DLPack conversion per call, no allocation
beyond the outputs. Each launch is one ``cuLaunchKernel`` (CuPy's binding of the driver
call) with the parameter buffer the launch template packed, on the caller's current
stream (``torch.cuda.current_stream()`` for torch tensors), so the launch is ordered with
the caller's own work.
Positions were range-checked on the host by :func:`anyrope._plan.make_plan` before
anything here runs; the kernel never reads a table row that does not exist.
"""

from __future__ import annotations

import ctypes
import functools
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import array_api_compat

from ... import _threads
from ..._namespace import Array, Namespace
from ..._plan import Plan
from . import _module
from .geometry import Launch, LaunchTemplate, Operand, launch_templates

__all__ = ["Launcher", "hold_cupy_tables", "launch_on_device", "rotate_raw"]

Launcher = Callable[[Array, str, Sequence[Launch], tuple[Array, Array]], None]
"""``launcher(first_array, dtype_name, launches, tables)`` runs a call's launches, in
order, on one stream, and keeps ``tables`` (the cos and sin they read) from reuse until
that stream has read them."""

NAME = "cuda"
"""The key of this path's entries in :attr:`anyrope._plan.Plan.memo`."""

# Launch templates of the arrays that are not a plan's own (gradients), by geometry.
_templates: dict[Hashable, list[LaunchTemplate]] = {}
_MAX_TEMPLATES = 512


def rotate_raw(
    plan: Plan,
    arrays: tuple[Array, ...],
    *,
    launcher: Launcher,
) -> tuple[Array, ...]:
    """Tables, positions, outputs and launches for ``arrays`` (the plan's, or the
    gradients flowing back), rotated as ``plan.inverse`` and ``plan.inplace`` say;
    ``launcher`` runs the launches.

    ``launcher`` is the CuPy launch for device arrays; the CPU tests pass the host
    harness, which runs the same kernel body on NumPy arrays with these same arguments.
    The launches are planned once per geometry (shapes, strides, dtypes, options and
    pointer alignments); a call after the first only binds its addresses.
    """
    xp, where, inverse, inplace = plan.xp, plan.where[0], plan.inverse, plan.inplace
    operand, address = _accessors(arrays[0])
    rows = plan.tables
    cos, sin, table_rows = address(rows.cos), address(rows.sin), int(rows.cos.shape[0])
    positions = rows.row_of  # int32 or int64 (see anyrope._positions)
    outputs = arrays if inplace else _empty_like(arrays, xp)
    io = [p for x, y in zip(arrays, outputs, strict=True) for p in (address(x), address(y))]
    # Positions left unread on the device are checked by the kernel against max_positions,
    # not against the rows the tables may have grown to: the result does not depend on
    # the calls made before.
    bound = min(where.stop, table_rows) if where.unread else table_rows
    # What the launches depend on besides the geometry of the arrays: the outputs are
    # C-contiguous arrays of the inputs' shapes, and the launches read pointers only for
    # the alignment they all share.
    key: tuple[object, ...] = (
        inverse,
        inplace,
        functools.reduce(operator.or_, io) % _ALIGN,
        cos,
        sin,
        table_rows,
        bound,
    )
    pos_ptr = 0 if positions is None else address(positions)
    if arrays is plan.arrays:
        # The plans of one geometry share their memo (Plan.memo): its templates need no
        # geometry in their key, nor the caller's positions (reshaped the same way).
        cache = plan.memo.setdefault(NAME, {})
        positions_vary = positions is not None and positions is not where.array
    else:
        # Gradients flowing back, whose strides are their own (their addresses are in
        # the alignment above).
        cache = _templates
        inputs = [operand(x)[1:] for x in arrays]  # shape and strides
        key = (plan.dtype, plan.axes.layout, plan.rotary_dim, plan.interleaved, *inputs, key)
        positions_vary = positions is not None
    if positions_vary:
        # What launches read of a positions array besides its address.
        key += (*operand(positions)[1:], _itemsize(positions))
    templates = cache.get(key)
    if templates is None:
        pos = None if positions is None else operand(positions)
        templates = launch_templates(
            [operand(x) for pair in zip(arrays, outputs, strict=True) for x in pair],
            layout=plan.axes.layout,
            itemsize=_itemsize(arrays[0]),
            rotary_dim=plan.rotary_dim,
            interleaved=plan.interleaved,
            inverse=inverse,
            inplace=inplace,
            positions=pos,
            position_itemsize=0 if positions is None else _itemsize(positions),
            cos_ptr=cos,
            sin_ptr=sin,
            table_rows=table_rows,
            bound=bound,
        )
        if len(cache) >= _MAX_TEMPLATES:
            cache.clear()
        cache[key] = templates
    if len(io) == 2:
        io += (0, 0)
    offset = rows.offset if positions is None else 0
    launches = [template.bind(io, pos_ptr, offset) for template in templates]
    if launches:  # none for empty arrays: nothing to launch, no table to keep
        launcher(arrays[0], plan.dtype, launches, (rows.cos, rows.sin))
    return outputs


_held_lock = _threads.lock()
#: Stream handle -> the CuPy tables its latest launch read (kept while it may be queued).
_in_use: dict[int, tuple[Array, ...]] = {}
#: Tables a stream has moved on from, each with an event recorded after its last reader.
_retired: list[tuple[Any, tuple[Array, ...]]] = []
#: Tables read by a launch under stream capture, by ``id`` of cos: a CUDA graph may
#: replay at any time, so they are kept for the life of the process.
_captured: dict[int, tuple[Array, ...]] = {}


def hold_cupy_tables(cupy: Any, stream: Any, tables: tuple[Array, Array]) -> None:
    """Keep CuPy ``tables`` from reuse until ``stream`` has run the launches that read them.

    The tables were put on the device earlier, maybe on another stream, and the cache
    may drop them (grown, cleared, their RoPE freed) while a kernel is still queued;
    CuPy's memory pool, unlike torch's (``record_stream``), cannot be told. Tables stay
    in use on a stream until a launch there reads others: a call that reads the tables
    of the previous call on its stream (every decode step of a model) records no event,
    queries none and takes no lock. When they change, one event, recorded after the
    launches that read the old ones, keeps those until it has passed (checked at the
    next change). Under stream capture there is no event, no query and no device
    allocation: a graph replays whenever it is launched, so the tables it reads are
    kept for good.
    """
    if stream.is_capturing():
        with _held_lock:
            _captured.setdefault(id(tables[0]), tables)
        return
    last = _in_use.get(stream.ptr)
    if last is not None and last[0] is tables[0] and last[1] is tables[1]:
        return
    with _held_lock:
        if last is not None:
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
            _retired[:] = [(done, kept) for done, kept in _retired if not done.done]
            _retired.append((event, last))
        _in_use[stream.ptr] = tables


# Alignment that the choice of a variant reads from a pointer (its widest access).
_ALIGN = 16


def _itemsize(x: Array) -> int:
    if array_api_compat.is_torch_array(x):
        return int(x.element_size())
    return int(x.dtype.itemsize)


def _operand(x: Array) -> Operand:
    """Address, shape and element strides of a CuPy or NumPy array (the host harness)."""
    itemsize = int(x.dtype.itemsize)
    return Operand(_address(x), tuple(x.shape), tuple(int(s) // itemsize for s in x.strides))


def _address(x: Array) -> int:
    """The address of the first element of a CuPy or NumPy array."""
    if array_api_compat.is_cupy_array(x):
        return int(x.data.ptr)
    return int(x.__array_interface__["data"][0])


def _torch_operand(x: Array) -> Operand:
    return Operand(x.data_ptr(), x.shape, x.stride())


def _accessors(first: Array) -> tuple[Callable[[Array], Operand], Callable[[Array], int]]:
    """:class:`Operand` and address of an array of ``first``'s library, without any
    conversion (torch tensors are asked first, cheaply; their address is the tensor
    method itself)."""
    if type(first).__module__.startswith("torch"):
        return _torch_operand, type(first).data_ptr
    return _operand, _address


def _empty_like(arrays: tuple[Array, ...], xp: Namespace) -> tuple[Array, ...]:
    """C-contiguous outputs of the shapes, dtype and device of ``arrays``."""
    if type(arrays[0]).__module__.startswith("torch"):
        torch = _torch()
        return tuple(
            [
                torch.empty_like(x)
                if x.is_contiguous()
                else torch.empty_like(x, memory_format=torch.contiguous_format)
                for x in arrays
            ]
        )
    return tuple(xp.empty(x.shape, dtype=x.dtype, device=x.device) for x in arrays)


@functools.cache
def _torch() -> Any:
    # Imported once: an import statement per call costs as much as the allocation.
    import torch

    return torch


def launch_on_device(
    first: Array, name: str, launches: Sequence[Launch], tables: tuple[Array, Array]
) -> None:
    """Run ``launches`` on the caller's current stream (torch's for torch tensors, looked
    up once per call as a raw handle) and keep ``tables`` until that stream has read them."""
    import cupy

    stream = None
    if array_api_compat.is_torch_array(first):
        device_id = first.get_device()
        # The handle alone: torch.cuda.current_stream makes a torch.cuda.Stream, which only
        # a new recording needs. The raw getter (what torch's compiled code calls) is
        # missing from torch builds without CUDA.
        torch = _torch()
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        stream_ptr = raw(device_id) if raw else torch.cuda.current_stream(device_id).cuda_stream
    else:
        device_id = int(first.device.id)
        stream = cupy.cuda.get_current_stream(device_id)
        stream_ptr = int(stream.ptr)
    launch_kernel, kernel_pointer = cupy.cuda.driver.launchKernel, _module.kernel_pointer
    with cupy.cuda.Device(device_id):
        for launch in launches:
            function = kernel_pointer(
                device_id, name, launch.width, launch.interleaved, launch.wide_index
            )
            # `extra` is the launch's buffer; the driver copies the parameters before it returns.
            at = ctypes.addressof(launch.buffer)
            launch_kernel(function, *launch.grid, *launch.block, launch.shared, stream_ptr, 0, at)
    if stream is None:
        _record_torch_tables(device_id, stream_ptr, tables)
    else:
        hold_cupy_tables(cupy, stream, tables)


#: Stream handle -> the torch tables recorded on it last.
_recorded: dict[int, tuple[Array, Array]] = {}


def _record_torch_tables(device_id: int, stream_ptr: int, tables: tuple[Array, Array]) -> None:
    """Keep torch ``tables`` from reuse until the stream ``stream_ptr`` of ``device_id``
    has passed the launches just queued.

    torch's caching allocator, when a block is freed, waits for every stream the block
    was recorded on (``record_stream``, under graph capture too): recording the same
    tables on the same stream again adds nothing, so a decode step that reads the tables
    of the step before records nothing. The tables are held here, so their identity
    cannot be taken by others.
    """
    cos, sin = _recorded.get(stream_ptr, (None, None))
    if cos is tables[0] and sin is tables[1]:
        return
    stream = _torch().cuda.current_stream(device_id)
    for table in tables:
        table.record_stream(stream)
    _recorded[stream_ptr] = tables
