"""Dispatch to the RoPE kernel from CuPy arrays and PyTorch CUDA tensors.

Arrays reach the kernel as raw device pointers (``cupy.ndarray.data.ptr``,
``torch.Tensor.data_ptr()``) and strides: no DLPack conversion per call, no allocation
beyond the outputs. Torch tensors are rotated on ``torch.cuda.current_stream()``, wrapped
as a CuPy external stream, so the launch is ordered with the caller's own work.
Positions were range-checked on the host by :func:`anyrope._plan.make_plan` before
anything here runs; the kernel never reads a table row that does not exist.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

import array_api_compat

from ..._namespace import Array, dtype_name
from ..._plan import Plan
from .launches import Launch, LaunchTemplate, Operand, launch_templates

__all__ = ["Launcher", "launch_on_device", "rotate_raw"]

Launcher = Callable[[Array, str, Launch], None]
"""``launcher(first_array, dtype_name, launch)`` runs one launch."""

# Launch templates per geometry (see _geometry); a call binds its addresses to them.
_templates: dict[Hashable, list[LaunchTemplate]] = {}
_MAX_TEMPLATES = 512


def rotate_raw(
    plan: Plan,
    arrays: tuple[Array, ...],
    *,
    inverse: bool,
    inplace: bool,
    launcher: Launcher,
) -> tuple[Array, ...]:
    """Tables, positions, outputs and launches for ``arrays`` (the plan's, or the
    gradients flowing back); ``launcher`` runs the launches.

    ``launcher`` is the CuPy launch for device arrays; the CPU tests pass the host
    harness, which runs the same kernel body on NumPy arrays with these same arguments.
    The launches are planned once per geometry (shapes, strides, dtypes, options and
    pointer alignments); a call after the first only binds its addresses.
    """
    xp, device, first = plan.xp, plan.device, arrays[0]
    rows = plan.tables.rows(plan.where[0], xp, device, plan.table_dtype)
    positions = rows.row_of
    if positions is not None and dtype_name(positions.dtype) not in ("int32", "int64"):
        positions = xp.astype(positions, xp.int64)
    outputs = (
        arrays
        if inplace
        else tuple(xp.empty(x.shape, dtype=x.dtype, device=device) for x in arrays)
    )
    operands = [_operand(x) for pair in zip(arrays, outputs, strict=True) for x in pair]
    pos = None if positions is None else _operand(positions)
    cos, sin = _operand(rows.cos), _operand(rows.sin)
    itemsize = _itemsize(first)
    position_itemsize = 0 if positions is None else _itemsize(positions)
    key = (
        itemsize,
        plan.axes.layout,
        plan.rotary_dim,
        plan.interleaved,
        inverse,
        inplace,
        *(_geometry(op) for op in operands),
        None if pos is None else _geometry(pos),
        position_itemsize,
        cos.ptr % _ALIGN,
        sin.ptr % _ALIGN,
        cos.shape[0],
    )
    templates = _templates.get(key)
    if templates is None:
        templates = launch_templates(
            operands[0],
            operands[1],
            operands[2] if len(operands) > 2 else None,
            operands[3] if len(operands) > 2 else None,
            layout=plan.axes.layout,
            itemsize=itemsize,
            rotary_dim=plan.rotary_dim,
            interleaved=plan.interleaved,
            inverse=inverse,
            inplace=inplace,
            positions=pos,
            position_itemsize=position_itemsize,
            cos_ptr=cos.ptr,
            sin_ptr=sin.ptr,
            table_rows=cos.shape[0],
        )
        if len(_templates) >= _MAX_TEMPLATES:
            _templates.clear()
        _templates[key] = templates
    pointers = [op.ptr for op in operands]
    pointers += [0] * (4 - len(pointers))
    pointers += [cos.ptr, sin.ptr, 0 if pos is None else pos.ptr]
    offset = rows.offset if pos is None else 0
    name = dtype_name(first.dtype)
    for template in templates:
        launcher(first, name, template.bind(pointers, offset))
    hold_until_read(rows.cos, rows.sin)
    return outputs


_held: list[tuple[Any, tuple[Array, ...]]] = []
_held_lock = threading.Lock()


def hold_until_read(*tables: Array) -> None:
    """Keep the tables a launch reads from reuse until its stream has read them.

    The tables were put on the device earlier, maybe on another stream, and the cache
    may drop them (grown, moved, cleared, or their RoPE freed) while the kernel is
    still queued. torch's caching allocator is told with ``record_stream``; CuPy's
    memory pool has no such call, so the arrays are kept, with an event recorded after
    the launch, until that event has passed. Host arrays (the CPU harness) need nothing.
    """
    first = tables[0]
    if array_api_compat.is_torch_array(first):
        if first.is_cuda:
            import torch

            stream = torch.cuda.current_stream(first.device)
            for table in tables:
                table.record_stream(stream)
        return
    if not array_api_compat.is_cupy_array(first):
        return
    import cupy

    event = cupy.cuda.Event(block=False, disable_timing=True)
    event.record(cupy.cuda.get_current_stream(int(first.device.id)))
    with _held_lock:
        _held[:] = [(done, kept) for done, kept in _held if not done.done]
        _held.append((event, tables))


# Alignment that the choice of a variant reads from a pointer (its widest access).
_ALIGN = 16


def _geometry(op: Operand) -> tuple[object, ...]:
    return op.shape, op.strides, op.ptr % _ALIGN


def _itemsize(x: Array) -> int:
    if array_api_compat.is_torch_array(x):
        return int(x.element_size())
    return int(x.dtype.itemsize)


def _operand(x: Array) -> Operand:
    """Address, shape and element strides of ``x`` without any conversion."""
    if type(x).__module__.startswith("torch"):  # the hot case, asked first and cheaply
        return Operand(x.data_ptr(), x.shape, x.stride())
    itemsize = int(x.dtype.itemsize)
    if array_api_compat.is_cupy_array(x):
        ptr = int(x.data.ptr)
    else:
        ptr = int(x.__array_interface__["data"][0])
    return Operand(ptr, tuple(x.shape), tuple(int(s) // itemsize for s in x.strides))


_stream_lock = threading.Lock()
_external_streams: dict[tuple[int, int], Any] = {}


def launch_on_device(first: Array, name: str, launch: Launch) -> None:
    import cupy

    from ._module import get_kernel

    if array_api_compat.is_torch_array(first):
        import torch

        device_id = int(first.device.index)
        stream = _torch_stream(
            cupy, device_id, int(torch.cuda.current_stream(device_id).cuda_stream)
        )
    else:
        device_id = int(first.device.id)
        stream = cupy.cuda.get_current_stream(device_id)
    kernel = get_kernel(
        device_id,
        name,
        width=launch.width,
        interleaved=launch.interleaved,
        wide_index=launch.wide_index,
    )
    with cupy.cuda.Device(device_id), stream:
        kernel(launch.grid, launch.block, launch.device_args())


def _torch_stream(cupy: Any, device_id: int, handle: int) -> Any:
    """The CuPy view of a torch stream, made once per (device, stream)."""
    key = (device_id, handle)
    stream = _external_streams.get(key)
    if stream is None:
        with _stream_lock:
            stream = _external_streams.setdefault(key, cupy.cuda.ExternalStream(handle, device_id))
    return stream
