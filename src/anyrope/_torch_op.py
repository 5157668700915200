"""The rotation as a torch custom op, for code that ``torch.compile`` traces.

Dynamo cannot trace the pipeline (array_api_compat's helpers, NumPy host math, locks,
raw pointers), and must not: the tables' bits come from host math it would rewrite.
So under ``torch.compiler.is_compiling()``, :class:`anyrope.RoPE` hands torch tensors to
the custom op ``anyrope::rotate`` (``anyrope::rotate_`` in place), which Dynamo puts in
the graph as one opaque node:

- its real kernel calls :func:`anyrope._pipeline.rotate` on the real tensors, so every
  path, every check and every bit are those of an eager call;
- its fake kernel gives outputs shaped like the inputs (after checking what shapes,
  dtypes and devices can tell);
- its backward is the op again with ``adjoint`` flipped: the pipeline's transpose of
  the rotation asked for (``a * R(-angle)`` forward, ``R(angle) / a`` for ``inverse``;
  see :func:`anyrope._plan.make_plan`).

The op takes tensors and primitives only; the table sources of a RoPE (one, or xPos's
two) are named by integer keys into a process-wide registry of weak references
(:func:`register`), given to each RoPE when it is made. Nothing here imports torch
until the op is first needed. Eager calls never come here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
import weakref
from typing import Any, NamedTuple

from . import _slices, _threads
from ._amplitude import Amplitude
from ._call import Call
from ._namespace import Array, table_dtype
from ._offsets import Offsets
from ._qkv import join_qkv, split_qkv
from ._tables import TableSource
from ._validation import describe
from .scaling import RopeScaling

__all__ = [
    "Target",
    "compiling",
    "concrete",
    "concrete_when_compiling",
    "register",
    "rotate",
    "rotate_qkv",
    "table_sources",
]

_sources: weakref.WeakValueDictionary[int, TableSource] = weakref.WeakValueDictionary()
_keys = itertools.count()
_lock = _threads.lock()

_NAMES = {1: ("x",), 2: ("q", "k")}

_POW = math.pow
"""What non-strict torch.export replaces with a lambda while it traces (see :func:`_gathered`)."""


class Target(NamedTuple):
    """What the op needs of a RoPE: the keys of the table sources of the arrays (one per
    array, as xPos has for queries and for keys, or one for every array) and its geometry."""

    keys: tuple[int, ...]
    head_dim: int
    interleaved: bool
    start: int
    """``start_index``: the features before it are kept."""


def register(source: TableSource) -> int:
    """A key naming ``source`` to the op, for as long as ``source`` lives."""
    with _lock:
        key = next(_keys)
        _sources[key] = source
    return key


def table_sources(
    scaling: RopeScaling,
    rotary_dim: int,
    base: float,
    max_positions: int | None,
    amplitudes: tuple[Amplitude | None, ...],
) -> list[tuple[TableSource, int]]:
    """The table sources of a new RoPE, one per amplitude (xPos has one for queries and
    one for keys), each with its key (see :func:`register`).

    Built outside the trace when torch.compile traces the RoPE being made (its host math
    cannot be traced), and then kept for the life of the process.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.compiler.is_compiling():
        sources = [TableSource(scaling, rotary_dim, base, a, max_positions) for a in amplitudes]
        return [(source, register(source)) for source in sources]
    # Dynamo would pass a dataclass on as one with its defaults: its fields go instead.
    # One call for every source: Dynamo reads `_built` once, after it.
    keys = _built_sources(
        type(scaling),
        _fields(scaling),
        rotary_dim,
        base,
        max_positions,
        amplitudes=tuple(() if a is None else _fields(a) for a in amplitudes),
    )
    return [(_built[key], key) for key in keys]


def _fields(record: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, getattr(record, f.name)) for f in dataclasses.fields(record))


def _built_sources(
    kind: type[RopeScaling],
    scaling: tuple[tuple[str, Any], ...],
    rotary_dim: int,
    base: float,
    max_positions: int | None,
    *,
    amplitudes: tuple[tuple[tuple[str, Any], ...], ...],
) -> tuple[int, ...]:
    keys = []
    for amplitude in amplitudes:
        made = Amplitude(**dict(amplitude)) if amplitude else None
        source = TableSource(kind(**dict(scaling)), rotary_dim, base, made, max_positions)
        key = register(source)
        _built[key] = source
        keys.append(key)
    return tuple(keys)


_built: dict[int, TableSource] = {}
"""The table sources of the RoPEs made inside compiled code."""
# Dynamo runs it for real and takes the key as a constant of the trace.
_built_sources._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _source(key: int) -> TableSource:
    source = _sources.get(key)
    if source is None:
        raise RuntimeError(
            f"the RoPE (key {key}) that this compiled code was traced with no longer exists; "
            "keep the RoPE alive as long as the compiled code that calls it"
        )
    return source


def _per_array(keys: tuple[int, ...] | list[int], count: int) -> tuple[TableSource, ...]:
    """The table source of each of ``count`` arrays: ``keys`` has one per array (xPos's
    of queries and of keys), or one for every array."""
    sources = tuple(map(_source, keys))
    return sources * count if len(sources) == 1 else sources


def compiling(x: object) -> bool:
    """Whether a call on ``x`` goes through this module: a torch tensor that
    ``torch.compile``, ``torch.export`` or ``torch.jit.trace`` traces, a meta tensor (the
    op's fake kernel gives meta results), a ``DTensor`` (its local shards are rotated) or
    a tensor that ``torch.func.vmap`` batches (the op's batching rule maps it).

    Never imports torch. Eagerly it costs a dictionary lookup and an ``isinstance`` for
    other arrays, and for plain tensors a call of ``torch.compiler.is_compiling``, of
    the tracer's state, an attribute read and functorch's test for a batched tensor
    (about 0.5 microseconds).
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    plain = type(x) is torch.Tensor
    return (
        torch.compiler.is_compiling()
        # torch.jit.trace records torch ops only: writes through raw memory would be
        # lost (the traced graph would return the empty outputs).
        or torch._C._get_tracing_state() is not None
        or x.is_meta
        or (not plain and _is_dtensor(x))
        # torch.func.vmap's batched tensors hold no memory of their own: the op maps them.
        or torch._C._functorch.is_batchedtensor(x)
    )


def concrete(value: Any) -> Any:
    """``value`` as a Python constant: a number that Dynamo made symbolic (with
    ``dynamic=True``, a function's defaults such as ``base=10000.0``) is specialized,
    guarded, so that code marked constant can take it."""
    if value is None or type(value) in (bool, str):
        return value
    from torch.fx.experimental.symbolic_shapes import guard_scalar

    return guard_scalar(value)


def concrete_when_compiling(*values: Any) -> tuple[Any, ...]:
    """``values``, each :func:`concrete` while ``torch.compile`` traces (a RoPE made inside
    compiled code, whose settings Dynamo may have made symbolic); else as they are."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.compiler.is_compiling():
        return values
    return tuple(map(concrete, values))


def _is_dtensor(x: Any) -> bool:
    tensor = sys.modules.get("torch.distributed.tensor")
    return tensor is not None and isinstance(x, tensor.DTensor)


def rotate(target: Target, call: Call) -> tuple[Array, ...]:
    """Rotate the torch tensors of ``call`` through the custom op; the code Dynamo traces.

    Plain attribute access and torch calls only, so that Dynamo traces it without a
    graph break. The features before ``target.start`` are kept, as eagerly.
    """
    import torch

    keys, head_dim, interleaved, start = target
    arrays = call.arrays
    if call.xp is not None:
        raise ValueError(
            "`xp` is inferred under torch.compile (the arrays are torch tensors); got "
            f"xp={call.xp!r}, pass xp=None"
        )
    if _is_dtensor(arrays[0]):
        return _rotate_shards(target, call)
    values, offset, per_row = _positions(call.positions)
    if start:
        whole, arrays = arrays, _slices.tails(arrays, call.names, head_dim, start)
    options: dict[str, Any] = {
        "keys": list(keys),
        "offset": offset,
        "per_row": per_row,
        "head_dim": head_dim - start,
        "interleaved": interleaved,
        "layout": call.layout,
        "inverse": call.inverse,
        "impl": call.impl,
    }
    _define_ops()
    ops = torch.ops.anyrope
    inplace = call.inplace
    # Packed sequences (thd) are not gathered: the op checks and rotates them.
    exporting = torch.compiler.is_exporting() and call.layout != "thd"
    sources = _per_array(keys, len(arrays)) if exporting else ()
    # An exported graph gathers the rows of tables of a fixed capacity (max_positions)
    # whose frequencies do not depend on the length.
    if sources and all(source.unread_bound and not source.sections for source in sources):
        rotated = _gathered(sources, arrays, call, interleaved)
    elif inplace and not (torch.is_grad_enabled() and any(x.requires_grad for x in arrays)):
        ops.rotate_(list(arrays), values, call.cu_seqlens, **options)
        return whole if start else arrays
    else:
        rotated = ops.rotate(list(arrays), values, call.cu_seqlens, adjoint=False, **options)
    if inplace:
        # Autograd records the copy, as it records the eager reference path's write.
        for x, y in zip(arrays, rotated, strict=True):
            x.copy_(y)
        return whole if start else arrays
    if start:
        # torch's own concat takes ``axis``, as the array API's does.
        return _slices.rejoin(whole, tuple(rotated), start, torch)
    return tuple(rotated)


def rotate_qkv(target: Target, call: Call, num_heads_q: int | None) -> Array:
    """:meth:`anyrope.RoPE.rotate_qkv` of ``call`` (whose one array is ``qkv``) through
    the custom op, for Dynamo to trace."""
    import torch

    fused = split_qkv(call.arrays[0], call.layout, num_heads_q)
    q, k = rotate(target, call.on((fused.q, fused.k), ("q", "k")))
    # torch's own stack and concat take ``axis``, as the array API's do.
    return call.arrays[0] if call.inplace else join_qkv(fused, q, k, torch)


def _positions(positions: object) -> tuple[Array | None, int, bool]:
    """``positions`` as the op takes them: ``(tensor or None, offset, per_row)``."""
    if positions is None or type(positions) is int:
        return None, 0 if positions is None else positions, False
    if isinstance(positions, Offsets):
        return positions.values, 0, True
    torch = sys.modules["torch"]
    if isinstance(positions, torch.Tensor):
        return positions, 0, False
    raise TypeError(
        "under torch.compile, `positions` must be None, an int, an integer tensor or "
        f"Offsets of an integer tensor; got {type(positions).__name__}"
    )


def _gathered(
    sources: tuple[TableSource, ...], arrays: tuple[Array, ...], call: Call, interleaved: bool
) -> list[Array]:
    """The rotation in plain torch ops, for ``torch.export`` and ONNX: rows of the
    capacity tables of each array's source (the cached tensors, constants of the graph)
    gathered by the positions inside the graph, with no size read, so batch and sequence
    stay symbolic. A position outside ``0 .. capacity-1`` gives a row of NaN."""
    import array_api_compat.torch as xp
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    from ._layout import Axes, place_tables
    from ._paths.rotation import rotate_pairs
    from ._tables import gather_rows

    layout, inverse = call.layout, call.inverse
    values, offset, per_row = _positions(call.positions)
    if values is not None and values.dtype not in (torch.int32, torch.int64):
        # index_select takes no other integer type; the eager path widens them too.
        values = values.to(torch.int64)
    x = arrays[0]
    steps = torch.arange(x.shape[{"bshd": -3, "bhsd": -2, "sbhd": 0}[layout]], device=x.device)
    if values is None:
        where = steps + offset
    elif per_row:
        where = values[..., None] + steps
    else:
        where = values + steps if values.ndim == 0 else values
    # Only the layout and the number of batch axes place the rows: no size is read.
    axes = Axes(layout, (0,) * (x.ndim - 3), 0, 0, 0)
    rows: dict[int, tuple[Array, Array]] = {}  # gathered once per source (q and k share one)
    for source in sources:
        capacity = source.unread_bound
        assert capacity, "a capacity is checked first"
        if id(source) in rows:
            continue
        cache = source.default.undoing if inverse else source.default
        # The cached tables, built outside the tracer: constants of the graph. numba
        # refuses to load its typing (the host math's first use in a process) while
        # math.pow is torch.export's lambda.
        swapped, math.pow = math.pow, _POW
        try:
            with _disable_current_modes():
                cos, sin = cache.get(capacity, xp, x.device, table_dtype(xp, x.dtype))
        finally:
            math.pow = swapped
        c, s = (place_tables(t, axes, xp) for t in gather_rows(cos, sin, where, capacity, xp))
        rows[id(source)] = c, s
    return [
        rotate_pairs(
            y,
            *rows[id(source)],
            rotary_dim=source.rotary_dim,
            interleaved=interleaved,
            inverse=inverse,
            xp=xp,
        )
        for source, y in zip(sources, arrays, strict=True)
    ]


def _rotate_shards(target: Target, call: Call) -> tuple[Array, ...]:
    """Rotate the local shards of DTensors, each by the positions of its own tokens, and
    wrap the results with the inputs' placements: no communication."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    arrays, positions, layout = call.arrays, call.positions, call.layout
    first = arrays[0]
    mesh, placements = first.device_mesh, first.placements
    for x, name in zip(arrays, call.names, strict=True):
        if not isinstance(x, DTensor) or (x.device_mesh, x.placements) != (mesh, placements):
            raise ValueError(
                f"`{name}` must be a DTensor on the mesh and with the placements of "
                f"`{call.names[0]}` ({placements}); got {describe(x)}"
            )
    if any(p.is_partial() for p in placements):
        raise ValueError(f"DTensors with partial placements cannot be rotated; got {placements}")
    local, start = compute_local_shape_and_global_offset(first.shape, mesh, placements)
    axis = {"bshd": first.ndim - 3, "bhsd": first.ndim - 2, "sbhd": 0}.get(layout)
    if axis is None:
        raise ValueError(f"DTensors take layout 'bshd', 'bhsd' or 'sbhd'; got {layout!r}")
    lead = axis + 1 if layout == "sbhd" else 0
    # The shard's first token is token `shift` of the whole sequence; its batch rows
    # start at `batch` (the positions of "sbhd" are given batch-first, as for every layout).
    shift, seq, batch = start[axis], local[axis], tuple(start[lead : lead + first.ndim - 3])
    rows = tuple(slice(b, b + n) for b, n in zip(batch, local[lead:], strict=False))
    if isinstance(positions, DTensor):
        positions = positions.full_tensor()
    # Anything else is refused by the call on the shards.
    if isinstance(positions, Offsets):
        positions = Offsets(_rows(positions.values, rows) + shift)
    elif isinstance(positions, torch.Tensor) and positions.ndim:
        # A last axis of 1 gives each row one position for all its tokens: kept whole.
        if positions.shape[-1] != 1:
            positions = positions[..., shift : shift + seq]
        positions = _rows(positions, rows, skip=1)
    elif positions is None or isinstance(positions, (int, torch.Tensor)):
        positions = (0 if positions is None else positions) + shift
    shards = tuple(x.to_local() for x in arrays)
    rotated = rotate(target, call._replace(arrays=shards, positions=positions))
    if call.inplace:
        return arrays
    return tuple(
        DTensor.from_local(y, mesh, placements, run_check=False, shape=x.shape, stride=x.stride())
        for x, y in zip(arrays, rotated, strict=True)
    )


def _rows(values: Array, rows: tuple[slice, ...], *, skip: int = 0) -> Array:
    """The batch rows of a shard, of ``values`` whose axes (before the last ``skip``) end
    with batch axes of the input's size or of size 1 (broadcast, kept whole)."""
    axes = values.shape[: values.ndim - skip]
    rows = rows[len(rows) - len(axes) :]
    return values[tuple(r if n != 1 else slice(None) for r, n in zip(rows, axes, strict=True))]


def _define_ops() -> None:
    """Define ``anyrope::rotate`` and ``anyrope::rotate_`` on first use (torch is
    imported only then)."""
    import torch

    with _lock:
        if not _defined:
            _define(torch)
            _defined.append(True)


_defined: list[bool] = []

# Dynamo calls _define_ops() for real when it traces rotate(), rather than tracing the
# definitions: what torch._dynamo.assume_constant_result marks, set without importing torch.
_define_ops._dynamo_marked_constant = True  # type: ignore[attr-defined]


# The ops' schema, with the type of the arrays, ``bool adjoint, `` or nothing, and the result
# to fill in. Written out: the annotations of this module are strings (``from __future__``),
# which torch cannot read to infer a schema. ``offset`` is a SymInt: a decode step's offset
# may be dynamic under torch.compile.
_SCHEMA = (
    "({} arrays, Tensor? positions, Tensor? cu_seqlens, *, int[] keys, SymInt offset, "
    "bool per_row, int head_dim, bool interleaved, str layout, bool inverse, {}str impl) -> {}"
)


def _define(torch: Any) -> None:
    """Define ``anyrope::rotate`` and ``anyrope::rotate_`` (keyword-only arguments: those
    of :data:`_SCHEMA`)."""
    from . import _pipeline
    from ._layout import heads_axis

    def run(
        arrays: list[Array],
        positions: Array | None,
        cu_seqlens: Array | None,
        *,
        keys: list[int],
        offset: int,
        per_row: bool,
        head_dim: int,
        interleaved: bool,
        **options: Any,
    ) -> tuple[Array, ...]:
        # The other options (layout, inverse, inplace, impl, adjoint) are the call's.
        where = offset if positions is None else Offsets(positions) if per_row else positions
        call = Call(tuple(arrays), _NAMES[len(arrays)], where, cu_seqlens, xp=None, **options)
        sources = _per_array(keys, len(arrays))
        return _pipeline.rotate_each(sources, call, head_dim=head_dim, interleaved=interleaved)

    def rotate_kernel(arrays: list[Array], *args: Any, **options: Any) -> list[Array]:
        rotated = run(arrays, *args, inplace=False, **options)
        # The fake kernel promises empty_like's strides; a path may lay its result out
        # otherwise (the reference concatenates into a contiguous array).
        outputs = []
        for x, y in zip(arrays, rotated, strict=True):
            like = torch.empty_like(x)
            outputs.append(y if like.stride() == y.stride() else like.copy_(y))
        return outputs

    def rotate_inplace_kernel(arrays: list[Array], *args: Any, **options: Any) -> None:
        run(arrays, *args, inplace=True, **options)

    def check(
        arrays: list[Array],
        positions: Array | None,
        cu_seqlens: Array | None,
        *,
        keys: list[int],
        head_dim: int,
        interleaved: bool,
        layout: str,
        impl: str,
        **values: Any,
    ) -> None:
        """What shapes, dtypes and devices tell: the checks of an eager call that do not
        read values (the positions and ``cu_seqlens`` are checked when the op runs).

        They read no batch, sequence or heads size, which would make torch.export and
        ``dynamic=True`` specialize them: those are checked by ``torch._check_value``
        (kept symbolic), the rest on stand-ins with such axes of size 1."""
        q, k = (*arrays, arrays[0])[:2]
        message = f"`k` must share the batch and sequence axes of `q`; got {describe(k)}"
        if k.ndim == q.ndim:
            for axis in set(range(-q.ndim, -1)) - {heads_axis(layout)}:
                torch._check_value(k.shape[axis] == q.shape[axis], lambda: message)
        # On the device of x, but for the meta device, which the eager checks refuse.
        stand_ins = tuple(
            x.new_empty((1,) * (x.ndim - 1) + x.shape[-1:], device="cpu" if x.is_meta else x.device)
            for x in arrays
        )
        # A packed (total_tokens, heads, head_dim) array reads as one bshd sequence.
        layout = "bshd" if layout == "thd" else layout
        call = Call(stand_ins, _NAMES[len(arrays)], None, None, layout, False, False, impl, None)
        _pipeline.path_name(_source(keys[0]), call, head_dim=head_dim, interleaved=interleaved)

    def rotate_fake(arrays: list[Array], *args: Any, **options: Any) -> list[Array]:
        check(arrays, *args, **options)
        return [torch.empty_like(x) for x in arrays]

    def setup_context(
        ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any
    ) -> None:
        _, positions, cu_seqlens = inputs
        ctx.save_for_backward(positions, cu_seqlens)
        ctx.options = keyword_only_inputs

    def backward(ctx: Any, grads: list[Array]) -> tuple[Any, ...]:
        positions, cu_seqlens = ctx.saved_tensors
        options = {**ctx.options, "adjoint": not ctx.options["adjoint"]}
        return torch.ops.anyrope.rotate(list(grads), positions, cu_seqlens, **options), None, None

    def mapped(
        info: Any,
        in_dims: tuple[Any, ...],
        arrays: list[Array],
        positions: Array | None,
        options: dict[str, Any],
    ) -> tuple[list[Array], Array | None, dict[str, Any], int]:
        """torch.func.vmap: the mapped axis becomes one more batch axis of every array
        (the first; for sbhd the one after the sequence) and of the positions. The
        arrays are views of the batched ones; also where that axis now lies."""
        array_dims, positions_dim, lengths_dim = in_dims
        layout = options["layout"]
        if lengths_dim is not None or layout == "thd":
            raise ValueError(
                "torch.func.vmap maps layouts 'bshd', 'bhsd' and 'sbhd'; got layout="
                f"{layout!r} (pass the packed sequences of every item at once instead)"
            )
        place = 1 if layout == "sbhd" else 0
        size = info.batch_size
        views = [
            x.movedim(axis, place)
            if axis is not None
            else x.unsqueeze(place).expand(*x.shape[:place], size, *x.shape[place:])
            for x, axis in zip(arrays, array_dims, strict=True)
        ]
        if positions is not None and positions_dim is not None:
            positions = positions.movedim(positions_dim, 0)
            batch = views[0].ndim - 3  # the mapped axis included
            per_row = options["per_row"] or positions.ndim == 1  # a 0-d offset per item
            given = positions.ndim - 1 - (0 if per_row else 1)  # its own batch axes
            shape = (size, *(1,) * (batch - 1 - given), *positions.shape[1:])
            positions = positions.reshape(shape)
            options = {**options, "per_row": per_row}
        return views, positions, options, place

    def rotate_vmap(
        info: Any,
        in_dims: tuple[Any, ...],
        arrays: list[Array],
        positions: Array | None,
        cu_seqlens: Array | None,
        **options: Any,
    ) -> tuple[list[Array], list[int]]:
        views, positions, options, place = mapped(info, in_dims, arrays, positions, options)
        rotated = torch.ops.anyrope.rotate(views, positions, cu_seqlens, **options)
        return rotated, [place] * len(rotated)

    def rotate_inplace_vmap(
        info: Any,
        in_dims: tuple[Any, ...],
        arrays: list[Array],
        positions: Array | None,
        cu_seqlens: Array | None,
        **options: Any,
    ) -> tuple[None, None]:
        names = _NAMES[len(arrays)]
        for axis, name in zip(in_dims[0], names, strict=True):
            if axis is None:
                raise ValueError(
                    f"`inplace`=True under torch.func.vmap needs `{name}` mapped too: its "
                    "items would each be written with their own rotation"
                )
        views, positions, options, _ = mapped(info, in_dims, arrays, positions, options)
        # The views share the memory of the batched tensors: written in place.
        torch.ops.anyrope.rotate_(views, positions, cu_seqlens, **options)
        return None, None

    rotate = torch.library.custom_op(
        "anyrope::rotate",
        rotate_kernel,
        mutates_args=(),
        schema=_SCHEMA.format("Tensor[]", "bool adjoint, ", "Tensor[]"),
    )
    rotate.register_fake(rotate_fake)
    rotate.register_autograd(backward, setup_context=setup_context)
    rotate.register_vmap(rotate_vmap)
    rotate_inplace = torch.library.custom_op(
        "anyrope::rotate_",
        rotate_inplace_kernel,
        mutates_args=("arrays",),
        schema=_SCHEMA.format("Tensor(a!)[]", "", "()"),
    )
    rotate_inplace.register_fake(check)
    rotate_inplace.register_vmap(rotate_inplace_vmap)
