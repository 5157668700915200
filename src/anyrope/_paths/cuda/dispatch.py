"""Dispatch to the RoPE kernel from CuPy arrays and PyTorch CUDA tensors.

Arrays reach the kernel as raw device pointers (``cupy.ndarray.data.ptr``,
``torch.Tensor.data_ptr()``) and strides: no DLPack conversion per call, no allocation
beyond the outputs. Each launch is one ``cuLaunchKernel`` (CuPy's binding of the driver
call) with the parameter buffer the launch template packed, on the caller's current
stream (``torch.cuda.current_stream()`` for torch tensors), so the launch is ordered with
the caller's own work.
Positions are range-checked on the host by :func:`anyrope._plan.make_plan` before
anything here runs, or, where they are left unread on the host (``max_positions``), by
the kernel as it reads them; the kernel never reads a table row that does not exist.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import array_api_compat

from ... import _threads
from ..._namespace import Array, Namespace
from ..._plan import Plan
from . import _module
from .geometry import Launch, LaunchTemplate, Operand, launch_templates

__all__ = ["Bound", "Launcher", "bind", "hold_cupy_tables", "launch_on_device", "rotate_raw"]

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
    address = _accessors(arrays[0])[1]
    rows = plan.tables
    positions = rows.row_of  # int32 or int64 (see anyrope._positions)
    outputs = arrays if plan.inplace else _empty_like(arrays, plan.xp)
    io = _io(arrays, outputs, address)
    templates = _plan_templates(plan, arrays, io)
    pos_ptr = 0 if positions is None else address(positions)
    offset = rows.offset if positions is None else 0
    launches = [template.bind(io, pos_ptr, offset) for template in templates]
    if launches:  # none for empty arrays: nothing to launch, no table to keep
        launcher(arrays[0], plan.dtype, launches, (rows.cos, rows.sin))
    return outputs


def _io(
    arrays: tuple[Array, ...], outputs: tuple[Array, ...], address: Callable[[Array], int]
) -> tuple[int, int, int, int]:
    """The addresses of q, its output, k and its output (0 and 0 without k)."""
    if len(arrays) == 2:
        return address(arrays[0]), address(outputs[0]), address(arrays[1]), address(outputs[1])
    return address(arrays[0]), address(outputs[0]), 0, 0


def _alignment(io: tuple[int, int, int, int]) -> int:
    # What the choice of a variant reads from the pointers: the alignment they all share.
    return (io[0] | io[1] | io[2] | io[3]) % _ALIGN


def _plan_templates(
    plan: Plan, arrays: tuple[Array, ...], io: tuple[int, int, int, int]
) -> list[LaunchTemplate]:
    """The launch templates of ``arrays`` rotated as ``plan`` says into their outputs (the
    arrays themselves in place, else C-contiguous arrays of their shapes) at the addresses
    ``io`` (of :func:`_io`), planned once per geometry."""
    operand, address = _accessors(arrays[0])
    where, inverse, inplace, rows = plan.where[0], plan.inverse, plan.inplace, plan.tables
    cos, sin, table_rows = address(rows.cos), address(rows.sin), int(rows.cos.shape[0])
    positions = rows.row_of
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
        _alignment(io),
        cos,
        sin,
        table_rows,
        bound,
    )
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
    else:
        # Whether launches read a positions array at all: the plans of one geometry take
        # an array whose rows hold one range as an offset (Plan.for_call), and other
        # values of the same array as an array.
        key += (positions is None,)
    templates: list[LaunchTemplate] | None = cache.get(key)
    if templates is None:
        pos = None if positions is None else operand(positions)
        ins = [operand(x) for x in arrays]
        outs = (
            ins
            if inplace
            else [
                Operand(p, x.shape, _c_strides(x.shape))
                for p, x in zip(io[1::2], ins, strict=False)
            ]
        )
        templates = launch_templates(
            [op for pair in zip(ins, outs, strict=True) for op in pair],
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
    return templates


class Bound:
    """The launches of a plan bound for the later calls of its geometry with its tables
    (:func:`bind`): a call binds its addresses, allocates its outputs and launches, and
    checks nothing else, since its geometry (shapes, strides, dtypes, devices, kind of
    positions, options) is that of the plan.

    A call returns ``None``, having launched nothing, where the plan's launches do not
    serve it: an offset whose rows these tables do not hold, a 0-d position array (read
    on the host), or pointers of another alignment (the launches chose their variant by
    it). The pipeline then plans it in full, and binds the tables that call fetched.
    """

    def __init__(self, plan: Plan, launcher: Launcher) -> None:
        address = _accessors(plan.arrays[0])[1]
        io = _io(plan.arrays, plan.arrays, address)
        if not plan.inplace:
            # Outputs are made per call, aligned by any allocator (a call checks that).
            io = (io[0], 0, io[2], 0)
        rows, where = plan.tables, plan.where[0]
        self._templates = _plan_templates(plan, plan.arrays, io)
        self._align = _alignment(io)
        self._address, self._xp, self._dtype = address, plan.xp, plan.dtype
        # Every call of the geometry has the plan's strides: where torch.empty_like gives
        # C-contiguous outputs for these, it is called itself, with no test per call.
        contiguous = plan.library == "torch" and all(x.is_contiguous() for x in plan.arrays)
        self._empty_like = _torch().empty_like if contiguous else None
        self._launcher, self._inplace = launcher, plan.inplace
        self._torch_inplace = plan.inplace and plan.library == "torch"
        self._tables = (rows.cos, rows.sin)
        # With an offset, row r of the tables holds position r + first.
        self._first = where.offset - rows.offset if rows.row_of is None else None
        self._rows, self._seq = int(rows.cos.shape[0]), where.seq

    def __call__(self, arrays: tuple[Array, ...], positions: object) -> tuple[Array, ...] | None:
        address, first = self._address, self._first
        if first is None:  # a positions array the kernel reads (and checks)
            pos_ptr, offset = address(positions), 0
        else:
            if positions is None:
                positions = 0
            elif type(positions) is not int:  # a 0-d array: its value is read on the host
                return None
            offset = positions - first
            if offset < 0 or offset + self._seq > self._rows:
                return None
            pos_ptr = 0
        if self._inplace:
            outputs = arrays
        elif self._empty_like is not None:
            outputs = tuple(map(self._empty_like, arrays))
        else:
            outputs = _empty_like(arrays, self._xp)
        io = _io(arrays, outputs, address)
        if _alignment(io) != self._align:
            return None
        launches = [template.bind(io, pos_ptr, offset) for template in self._templates]
        if launches:
            self._launcher(arrays[0], self._dtype, launches, self._tables)
        if self._torch_inplace:
            from ..._torch import bump_versions

            bump_versions(arrays)
        return outputs


def bind(plan: Plan, *, launcher: Launcher) -> Bound | None:
    """:class:`Bound` launches of ``plan`` (its arrays rotated, its tables fetched), or
    ``None`` where a later call needs more than its addresses bound: positions read on
    the host, several position streams, or in place where the pipeline checks the
    memory of each call again (two arrays, which may share it; a NumPy array, which may
    be read-only). One device array in place (``rotate_qkv``'s q and k as one view)
    is bound."""
    if len(plan.where) != 1:
        return None
    if plan.inplace and (len(plan.arrays) > 1 or plan.library == "numpy"):
        return None
    where = plan.where[0]
    if where.array is not None and not where.unread:
        return None
    return Bound(plan, launcher)


_held_lock = _threads.lock()
#: (Device, stream handle) -> the CuPy tables its latest launch read (kept while it may be
#: queued). The device too: handle 0 names the null stream of every device.
_in_use: dict[tuple[int, int], tuple[Array, ...]] = {}
#: Tables a stream has moved on from, each with an event recorded after its last reader.
_retired: list[tuple[Any, tuple[Array, ...]]] = []
#: Tables read by a launch under stream capture, by ``id`` of cos: a CUDA graph may
#: replay at any time, so they are kept for the life of the process.
_captured: dict[int, tuple[Array, ...]] = {}


def hold_cupy_tables(
    cupy: Any, stream: Any, tables: tuple[Array, Array], *, device_id: int
) -> None:
    """Keep CuPy ``tables`` from reuse until ``stream`` (of device ``device_id``) has run
    the launches that read them.

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
    where = (device_id, stream.ptr)
    last = _in_use.get(where)
    if last is not None and last[0] is tables[0] and last[1] is tables[1]:
        return
    with _held_lock:
        if last is not None:
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
            _retired[:] = [(done, kept) for done, kept in _retired if not done.done]
            _retired.append((event, last))
        _in_use[where] = tables


# Alignment that the choice of a variant reads from a pointer (its widest access).
_ALIGN = 16


def _c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The element strides of a C-contiguous array of ``shape``."""
    strides = [1]
    for size in reversed(shape[1:]):
        strides.append(strides[-1] * size)
    return tuple(reversed(strides))


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
        if all(x.is_contiguous() for x in arrays):
            return tuple(map(torch.empty_like, arrays))
        return tuple(torch.empty_like(x, memory_format=torch.contiguous_format) for x in arrays)
    if type(arrays[0]).__module__.startswith("cupy"):
        # CuPy allocates on its current device (array-api-compat's `empty` drops
        # `device=`): the outputs go to the arrays' device, where the kernel runs
        # (launch_on_device), with it current. CuPy's own `empty`: the wrapper's checks
        # cost more than the allocation.
        cupy = _cupy()
        with arrays[0].device:
            return tuple(cupy.empty(x.shape, dtype=x.dtype) for x in arrays)
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
    cupy, torch = _cupy(), sys.modules.get("torch")
    stream = None
    if torch is not None and isinstance(first, torch.Tensor):
        device_id = first.get_device()
        # The raw getter that torch's compiled code calls (torch.cuda.current_stream makes
        # a torch.cuda.Stream, which only a new recording needs), or the public API in a
        # torch build without it.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        stream_ptr = (
            int(raw(device_id)) if raw else int(torch.cuda.current_stream(device_id).cuda_stream)
        )
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
        last = _recorded.get((device_id, stream_ptr))
        if last is None or last[0] is not tables[0] or last[1] is not tables[1]:
            _record_torch_tables(device_id, stream_ptr, tables)
    else:
        hold_cupy_tables(cupy, stream, tables, device_id=device_id)


def _cupy() -> Any:
    # The module itself, not an import statement (about a microsecond at every call).
    return sys.modules.get("cupy") or importlib.import_module("cupy")


#: (Device, stream handle) -> the torch tables recorded on that stream last.
_recorded: dict[tuple[int, int], tuple[Array, Array]] = {}


def _record_torch_tables(device_id: int, stream_ptr: int, tables: tuple[Array, Array]) -> None:
    """Keep torch ``tables`` from reuse until the stream ``stream_ptr`` of ``device_id``
    has passed the launches just queued.

    torch's caching allocator, when a block is freed, waits for every stream the block
    was recorded on (``record_stream``, under graph capture too): recording the same
    tables on the same stream again adds nothing, so a decode step that reads the tables
    of the step before (the last recorded on its stream) does not call this. The tables
    are held here, so their identity cannot be taken by others.
    """
    stream = _torch().cuda.current_stream(device_id)
    for table in tables:
        table.record_stream(stream)
    _recorded[device_id, stream_ptr] = tables
