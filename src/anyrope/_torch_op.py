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

import itertools
import sys
import weakref
from typing import Any, NamedTuple

from . import _slices, _threads
from ._call import Call
from ._namespace import Array
from ._offsets import Offsets
from ._qkv import join_qkv, split_qkv
from ._tables import TableSource

__all__ = ["Target", "compiling", "register", "rotate", "rotate_qkv"]

_sources: weakref.WeakValueDictionary[int, TableSource] = weakref.WeakValueDictionary()
_keys = itertools.count()
_lock = _threads.lock()

_NAMES = {1: ("x",), 2: ("q", "k")}


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


def _source(key: int) -> TableSource:
    source = _sources.get(key)
    if source is None:
        raise RuntimeError(
            f"the RoPE (key {key}) that this compiled code was traced with no longer exists; "
            "keep the RoPE alive as long as the compiled code that calls it"
        )
    return source


def compiling(x: object) -> bool:
    """Whether ``torch.compile`` is tracing a call on the torch tensor ``x``.

    Never imports torch. Eagerly it costs a dictionary lookup and an ``isinstance`` for
    other arrays, and one call of ``torch.compiler.is_compiling`` more for tensors
    (about 0.15 microseconds).
    """
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and torch.compiler.is_compiling()


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
    values, offset, per_row = _positions(call.positions)
    if start:
        whole, arrays = arrays, _slices.tails(arrays, call.names, head_dim, start)
    options = {
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
    if inplace and not (torch.is_grad_enabled() and any(x.requires_grad for x in arrays)):
        ops.rotate_(list(arrays), values, call.cu_seqlens, **options)
        return whole if start else arrays
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
    if positions is None:
        return None, 0, False
    if type(positions) is int:
        return None, positions, False
    if isinstance(positions, Offsets):
        return positions.values, 0, True
    torch = sys.modules["torch"]
    if isinstance(positions, torch.Tensor):
        return positions, 0, False
    raise TypeError(
        "under torch.compile, `positions` must be None, an int, an integer tensor or "
        f"Offsets of an integer tensor; got {type(positions).__name__}"
    )


def _pipeline_positions(values: Array | None, offset: int, per_row: bool) -> object:
    if values is None:
        return offset
    return Offsets(values) if per_row else values


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


def _schema(arrays: str, returns: str, *, adjoint: bool = False) -> str:
    # Written out: the annotations of this module are strings (``from __future__``),
    # which torch cannot read to infer a schema. ``offset`` is a SymInt: a decode step's
    # offset may be dynamic under torch.compile.
    flag = "bool adjoint, " if adjoint else ""
    return (
        f"({arrays} arrays, Tensor? positions, Tensor? cu_seqlens, *, int[] keys, SymInt offset, "
        f"bool per_row, int head_dim, bool interleaved, str layout, bool inverse, {flag}"
        f"str impl) -> {returns}"
    )


def _define(torch: Any) -> None:
    """Define ``anyrope::rotate`` and ``anyrope::rotate_`` (keyword-only arguments: those
    of :func:`_schema`)."""
    from . import _pipeline
    from ._paths import choose
    from ._plan import make_plan

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
        layout: str,
        inverse: bool,
        inplace: bool,
        impl: str,
        adjoint: bool = False,
    ) -> tuple[Array, ...]:
        call = Call(
            tuple(arrays),
            _NAMES[len(arrays)],
            _pipeline_positions(positions, offset, per_row),
            cu_seqlens,
            layout,
            inverse,
            inplace,
            impl,
            None,
            adjoint,
        )
        # One key per array, or one for every array.
        sources = tuple(map(_source, keys)) * (len(arrays) if len(keys) == 1 else 1)
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
        read values (the positions and ``cu_seqlens`` are checked when the op runs)."""
        # A packed (total_tokens, heads, head_dim) array reads as one bshd sequence.
        layout = "bshd" if layout == "thd" else layout
        call = Call(
            tuple(arrays), _NAMES[len(arrays)], None, None, layout, False, False, impl, None
        )
        plan = make_plan(_source(keys[0]), call, head_dim=head_dim, interleaved=interleaved)
        choose(impl, plan)

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

    rotate = torch.library.custom_op(
        "anyrope::rotate",
        rotate_kernel,
        mutates_args=(),
        schema=_schema("Tensor[]", "Tensor[]", adjoint=True),
    )
    rotate.register_fake(rotate_fake)
    rotate.register_autograd(backward, setup_context=setup_context)
    rotate_inplace = torch.library.custom_op(
        "anyrope::rotate_",
        rotate_inplace_kernel,
        mutates_args=("arrays",),
        schema=_schema("Tensor(a!)[]", "()"),
    )
    rotate_inplace.register_fake(check)
