"""Where the batch, sequence and heads axes of ``x`` are, for each ``layout``.

TransformerEngine's names: ``"bshd"`` = (*batch, seq, heads, dim), ``"bhsd"`` =
(*batch, heads, seq, dim), ``"sbhd"`` = (seq, *batch, heads, dim).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._namespace import Array, Namespace
from ._validation import LAYOUTS, check_choice, describe


@dataclass(frozen=True)
class Axes:
    """The axes of one input: its ``batch`` extents, ``seq`` length and ``heads`` count
    (``None`` for a symbolic dimension of a graph input, known when the graph runs)."""

    layout: str
    batch: tuple[int, ...]
    seq: int
    heads: int
    head_dim: int


def axes_of(x: Array, layout: str, argument: str = "x") -> Axes:
    """Split the shape of ``x`` according to ``layout``."""
    check_choice(layout, "layout", LAYOUTS)
    # None is a symbolic dimension (an ndonnx graph input's), known when the graph runs.
    shape: tuple[Any, ...] = tuple(None if n is None else int(n) for n in x.shape)
    if len(shape) < 3:
        raise ValueError(
            f"`{argument}` must have at least 3 axes for layout={layout!r} "
            f"({', '.join(_AXES[axis] for axis in layout)}); got {describe(x)}"
        )
    if layout == "bshd":
        *batch, seq, heads, dim = shape
    elif layout == "bhsd":
        *batch, heads, seq, dim = shape
    else:
        seq, *batch, heads, dim = shape
    return Axes(layout, tuple(batch), seq, heads, dim)


def heads_axis(layout: str) -> int:
    """The heads axis of ``layout``, counted from the end (head_dim is -1); a packed
    ``"thd"`` input, ``(total_tokens, heads, head_dim)``, has it where ``"bshd"`` does."""
    if layout not in (*LAYOUTS, "thd"):
        check_choice(layout, "layout", LAYOUTS)  # raises, naming the layouts
    return -3 if layout == "bhsd" else -2


#: The axes that the letters of a layout name.
_AXES = {"b": "*batch", "s": "seq", "h": "heads", "d": "head_dim"}


def range_table_shape(axes: Axes, rows: int, features: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of a table of ``rows`` consecutive positions (rows first, then
    ``features``) that broadcasts against ``x``: size-1 axes stand for the heads axis, and
    for ``"sbhd"`` the batch axes, between the sequence and the features."""
    if axes.layout == "bshd":
        return (rows, 1, *features)
    if axes.layout == "bhsd":
        return (rows, *features)
    return (rows, *(1,) * (len(axes.batch) + 1), *features)


def place_tables(table: Array, axes: Axes, xp: Namespace) -> Array:
    """Arrange a gathered table of shape ``(*batch', seq, pairs)`` to broadcast against ``x``.

    ``*batch'`` has up to ``len(axes.batch)`` axes, each of size 1 or full; missing leading
    axes are added. The heads axis becomes a size-1 axis, and for ``"sbhd"`` the sequence
    axis moves to the front.
    """
    if None in table.shape:
        # A symbolic dimension (ndonnx) has no reshape: size-1 axes by expand_dims.
        for _ in range(len(axes.batch) + 2 - table.ndim):
            table = xp.expand_dims(table, axis=0)
        if axes.layout == "sbhd":
            nb = len(axes.batch)
            table = xp.permute_dims(table, (nb, *range(nb), nb + 1))
        return xp.expand_dims(table, axis=-3 if axes.layout == "bhsd" else -2)
    if table.ndim == 2:
        return xp.reshape(table, range_table_shape(axes, table.shape[0], (table.shape[1],)))
    nb = len(axes.batch)
    shape = (1,) * (nb + 2 - table.ndim) + tuple(table.shape)
    # One reshape (a view): the cheapest way to add size-1 axes, on every library.
    if axes.layout == "bshd":
        return xp.reshape(table, (*shape[:-1], 1, shape[-1]))
    if axes.layout == "bhsd":
        return xp.reshape(table, (*shape[:-2], 1, *shape[-2:]))
    table = xp.reshape(table, shape)
    order = (nb, *range(nb), nb + 1)
    return xp.expand_dims(xp.permute_dims(table, order), axis=-2)
