"""Dispatch to the RoPE kernel from CuPy arrays and PyTorch CUDA tensors.

Arrays reach the kernel as raw device pointers (``cupy.ndarray.data.ptr``,
``torch.Tensor.data_ptr()``) and strides: no DLPack conversion per call, no allocation
beyond the outputs. Torch tensors are rotated on ``torch.cuda.current_stream()``, wrapped
as a CuPy external stream, so the launch is ordered with the caller's own work.
Positions were range-checked on the host by :func:`anyrope._positions.resolve_positions`
before anything here runs; the kernel never reads a table row that does not exist.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import array_api_compat
import numpy as np

from .._namespace import Array, Namespace, device_of, dtype_name, table_dtype, to_host
from ._plan import Launch, Operand, plan_launches

if TYPE_CHECKING:
    from .._positions import Positions
    from .._rope import RoPE

__all__ = ["cuda_array", "rotate_cuda", "unsupported_reason", "usable"]

Launcher = Callable[[Array, str, Launch, int], None]
"""``launcher(first_array, dtype_name, launch, position_itemsize)`` runs one launch."""


def cuda_array(x: Array) -> bool:
    """True for a CuPy array or a PyTorch tensor on a CUDA device."""
    if array_api_compat.is_cupy_array(x):
        return True
    return bool(array_api_compat.is_torch_array(x) and x.is_cuda)


def usable(arrays: tuple[Array, ...]) -> bool:
    """Whether the kernel can take ``arrays``; asked on every call, so it builds no message."""
    return all(cuda_array(x) for x in arrays) and _cupy_installed()


def unsupported_reason(arrays: tuple[Array, ...]) -> str | None:
    """Why ``impl="cuda"`` cannot take ``arrays``, or ``None`` when it can."""
    if not all(cuda_array(x) for x in arrays):
        kinds = ", ".join(sorted({_describe_place(x) for x in arrays}))
        return f"`impl`='cuda' needs CuPy arrays or PyTorch CUDA tensors; got {kinds}"
    if not _cupy_installed():
        return "`impl`='cuda' needs CuPy (pip install cupy-cuda12x), which is not installed"
    return None


@functools.cache
def _cupy_installed() -> bool:
    # Asked on every call with torch CUDA tensors: search sys.path once.
    return importlib.util.find_spec("cupy") is not None


def _describe_place(x: Array) -> str:
    return f"{type(x).__module__.split('.')[0]} arrays on device {device_of(x)}"


def rotate_cuda(
    rope: RoPE,
    arrays: tuple[Array, ...],
    where: Positions,
    *,
    layout: str,
    inverse: bool,
    inplace: bool,
    xp: Namespace,
) -> tuple[Array, ...]:
    """Rotate q (and k) in one kernel launch; torch tensors that need grad go through autograd."""
    if array_api_compat.is_torch_array(arrays[0]):
        import torch

        if torch.is_grad_enabled() and any(x.requires_grad for x in arrays):
            from .autograd import rotate_with_grad

            return rotate_with_grad(
                rope, arrays, where, layout=layout, inverse=inverse, inplace=inplace, xp=xp
            )
    outputs = rotate_raw(
        rope,
        arrays,
        where,
        layout=layout,
        inverse=inverse,
        inplace=inplace,
        xp=xp,
        launcher=_launch_on_device,
    )
    if inplace and array_api_compat.is_torch_array(arrays[0]):
        from torch.autograd.graph import increment_version

        # Writes through data_ptr() do not bump torch's version counter; autograd needs it
        # to refuse a backward through a tensor saved before this in-place rotation.
        # Inference tensors have no counter (older torch raises when asked to bump one).
        for x in arrays:
            if not x.is_inference():
                increment_version(x)
    return outputs


def rotate_raw(
    rope: RoPE,
    arrays: tuple[Array, ...],
    where: Positions,
    *,
    layout: str,
    inverse: bool,
    inplace: bool,
    xp: Namespace,
    launcher: Launcher,
) -> tuple[Array, ...]:
    """Tables, positions, outputs and launch plan for ``arrays``; ``launcher`` runs them.

    ``launcher`` is the CuPy launch for device arrays; the CPU tests pass the host
    harness, which runs the same kernel body on NumPy arrays with these same arguments.
    """
    first = arrays[0]
    device = device_of(first)
    cos, sin, positions, offset = _tables_and_positions(rope, where, xp, device, first.dtype)
    outputs = (
        arrays
        if inplace
        else tuple(xp.empty(x.shape, dtype=x.dtype, device=device) for x in arrays)
    )
    ins = [_operand(x) for x in arrays]
    outs = [_operand(y) for y in outputs]
    if inplace:
        for op in ins:
            if any(s == 0 and n > 1 for s, n in zip(op.strides, op.shape, strict=True)):
                raise ValueError(
                    "`inplace`=True needs arrays whose elements do not overlap; got a "
                    f"broadcast view of shape {op.shape} with strides {op.strides}"
                )
    launches = plan_launches(
        ins[0],
        outs[0],
        ins[1] if len(ins) > 1 else None,
        outs[1] if len(outs) > 1 else None,
        layout=layout,
        itemsize=_itemsize(first),
        rotary_dim=rope.rotary_dim,
        interleaved=rope.interleaved,
        inverse=inverse,
        inplace=inplace,
        positions=None if positions is None else _operand(positions),
        position_itemsize=0 if positions is None else _itemsize(positions),
        offset=offset,
        cos_ptr=_operand(cos).ptr,
        sin_ptr=_operand(sin).ptr,
    )
    name = dtype_name(first.dtype)
    position_itemsize = 8 if positions is None else _itemsize(positions)
    for launch in launches:
        launcher(first, name, launch, position_itemsize)
    return outputs


def _tables_and_positions(
    rope: RoPE, where: Positions, xp: Namespace, device: Any, dtype: Any
) -> tuple[Array, Array, Array | None, int]:
    """Tables indexed by position (row = position) and what the kernel indexes them with.

    Cacheable positions use the RoPE's device-resident tables for ``0 .. stop-1``. Larger
    ones get tables for just the positions asked for: a range starts at row 0, and an
    array is replaced by the indices of its distinct values.
    """
    cache = rope._cache
    tdtype = table_dtype(xp, dtype)
    if where.array is None:
        if cache.cacheable(where.stop):
            cos, sin = cache.get(where.stop, xp, device, tdtype)
            return cos, sin, None, where.offset
        rows = np.arange(where.offset, where.stop, dtype=np.int64)
        cos, sin = cache.build(rows, xp, device, tdtype)
        return cos, sin, None, 0
    if cache.cacheable(where.stop):
        cos, sin = cache.get(where.stop, xp, device, tdtype)
        positions = where.array
        if dtype_name(positions.dtype) not in ("int32", "int64"):
            positions = xp.astype(positions, xp.int64)
        return cos, sin, positions, 0
    host = to_host(where.array).astype(np.int64)
    distinct, index = np.unique(host, return_inverse=True)
    cos, sin = cache.build(distinct, xp, device, tdtype)
    positions = xp.asarray(index.reshape(host.shape).astype(np.int64), device=device)
    return cos, sin, positions, 0


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


def _launch_on_device(first: Array, name: str, launch: Launch, position_itemsize: int) -> None:
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
