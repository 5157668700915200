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
from collections.abc import Callable
from typing import Any

import array_api_compat

from ..._namespace import Array, dtype_name
from ..._plan import Plan
from .launches import Launch, Operand, plan_launches

__all__ = ["Launcher", "launch_on_device", "rotate_raw"]

Launcher = Callable[[Array, str, Launch, int], None]
"""``launcher(first_array, dtype_name, launch, position_itemsize)`` runs one launch."""


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
    ins = [_operand(x) for x in arrays]
    outs = [_operand(y) for y in outputs]
    launches = plan_launches(
        ins[0],
        outs[0],
        ins[1] if len(ins) > 1 else None,
        outs[1] if len(outs) > 1 else None,
        layout=plan.axes.layout,
        itemsize=_itemsize(first),
        rotary_dim=plan.rotary_dim,
        interleaved=plan.interleaved,
        inverse=inverse,
        inplace=inplace,
        positions=None if positions is None else _operand(positions),
        position_itemsize=0 if positions is None else _itemsize(positions),
        offset=rows.offset,
        cos_ptr=_operand(rows.cos).ptr,
        sin_ptr=_operand(rows.sin).ptr,
    )
    name = dtype_name(first.dtype)
    position_itemsize = 8 if positions is None else _itemsize(positions)
    for launch in launches:
        launcher(first, name, launch, position_itemsize)
    return outputs


def _itemsize(x: Array) -> int:
    if array_api_compat.is_torch_array(x):
        return int(x.element_size())
    return int(x.dtype.itemsize)


def _operand(x: Array) -> Operand:
    """Address, shape and element strides of ``x`` without any conversion."""
    if array_api_compat.is_torch_array(x):
        return Operand(int(x.data_ptr()), tuple(x.shape), tuple(int(s) for s in x.stride()))
    itemsize = int(x.dtype.itemsize)
    if array_api_compat.is_cupy_array(x):
        ptr = int(x.data.ptr)
    else:
        ptr = int(x.__array_interface__["data"][0])
    return Operand(ptr, tuple(x.shape), tuple(int(s) // itemsize for s in x.strides))


_stream_lock = threading.Lock()
_external_streams: dict[tuple[int, int], Any] = {}


def launch_on_device(first: Array, name: str, launch: Launch, position_itemsize: int) -> None:
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
        vector=launch.vector,
        interleaved=launch.interleaved,
        position_itemsize=position_itemsize,
    )
    with cupy.cuda.Device(device_id), stream:
        kernel((launch.grid,), (launch.block,), launch.device_args())


def _torch_stream(cupy: Any, device_id: int, handle: int) -> Any:
    """The CuPy view of a torch stream, made once per (device, stream)."""
    key = (device_id, handle)
    stream = _external_streams.get(key)
    if stream is None:
        with _stream_lock:
            stream = _external_streams.setdefault(key, cupy.cuda.ExternalStream(handle, device_id))
    return stream
