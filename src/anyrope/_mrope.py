"""Positions with several streams: M-RoPE (Qwen2-VL) and axial RoPE (image patches, video).

Both split the ``rotary_dim // 2`` frequency pairs into contiguous sections and give
each section its own position stream:

- **M-RoPE** (Qwen2-VL, Qwen2.5-VL): positions ``(3, *batch, seq)`` (temporal,
  height, width) and ``mrope_section`` (e.g. ``[16, 24, 24]``, summing to the number
  of pairs): pair ``i`` takes its angle from the stream whose section contains ``i``.
  Text tokens carry three equal streams, which is ordinary RoPE.
- **interleaved M-RoPE** (Qwen3-VL, Qwen3.5, Qwen3-Omni, Cosmos 3, Cohere Compass:
  ``mrope_interleaved``): the same positions and ``mrope_section``, but the streams
  take the pairs in turn (t, h, w, t, h, w, ...): pair ``i`` follows stream
  ``s = i % n`` while ``i < n * mrope_section[s]`` (``n`` streams), and stream 0 past
  that, as transformers' ``recomposition_frequencies`` assigns them.
- **axial** (``rope_type="axial"``: EVA-02, Qwen2-VL's vision tower, FLUX-style image
  tokens; video DiTs with ``axial_sections``): positions ``(*batch, seq, n)``, one
  coordinate per axis; section ``a`` follows coordinate ``a`` (by default ``n = 2``, the
  first half of the pairs following the row and the second the column; frequencies in
  :mod:`anyrope.scaling.axial`).

Tables are gathered per stream (each entry exactly the one ordinary RoPE would use
for that position) and their sections are joined, so equal streams give the bits of
ordinary RoPE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._namespace import Array, Namespace, device_of
from ._positions import Positions, resolve_positions


def resolve_streams(
    positions: object,
    *,
    kind: str,
    count: int,
    xp: Namespace,
    x: Array,
    batch: tuple[int, ...],
    seq: int,
) -> list[Positions]:
    """Split and check multi-stream positions; ``kind`` is ``"mrope"`` or ``"axial"``.

    Each stream is checked like ordinary positions (integer dtype, the input's library
    and device, broadcastable to ``(*batch, seq)``, within ``[0, 2**53)``).
    """
    mrope = kind == "mrope"
    expected = f"({count}, *batch, seq) or ({count}, seq)" if mrope else f"(*batch, seq, {count})"
    if positions is None or not hasattr(positions, "shape") or isinstance(positions, (list, tuple)):
        raise TypeError(
            f"`positions` must be an integer array of shape {expected} for "
            f"{'M-RoPE' if mrope else f'{count}D axial RoPE'}; got {type(positions).__name__}"
        )
    array: Array = positions
    shape = tuple(int(n) for n in array.shape)
    if len(shape) < 2 or shape[0 if mrope else -1] != count:
        if mrope:
            raise ValueError(
                f"M-RoPE `positions` must have shape {expected} (one stream per mrope_section "
                f"entry); got shape {shape}. Text tokens have the same position in every "
                f"stream: pass {count} copies stacked on a new first axis (transformers does "
                "this with a 2-D position_ids), or an int offset for consecutive positions"
            )
        order = f"one coordinate per axis, in the order of the {count} axial_sections"
        raise ValueError(
            f"{count}D axial `positions` must have shape {expected} "
            f"({'row, column' if count == 2 else order}); got shape {shape}"
        )
    streams = [array[(index, ...) if mrope else (..., index)] for index in range(count)]
    return [resolve_positions(stream, xp, x, batch, seq) for stream in streams]


def split_host_streams(
    host: np.ndarray[Any, Any], sections: Sequence[int], *, axial: bool
) -> list[np.ndarray[Any, Any]]:
    """Split host positions into streams: the last axis for axial RoPE, else the first."""
    count = len(sections)
    axis = -1 if axial else 0
    if host.ndim < 1 or host.shape[axis] != count:
        expected = f"(..., {count})" if axial else f"({count}, ...)"
        raise ValueError(
            f"`positions` must have shape {expected} for "
            f"{f'{count}D axial RoPE' if axial else 'M-RoPE'}; got shape {host.shape}"
        )
    return [np.take(host, index, axis=axis) for index in range(count)]


def join_sections(
    tables: Sequence[tuple[Array, Array]],
    sections: Sequence[int],
    xp: Namespace,
    *,
    interleaved: bool = False,
) -> tuple[Array, Array]:
    """Take each pair's cos/sin from the tables of the stream it follows.

    Contiguous: pairs ``[start, start + size)`` of section ``s`` from stream ``s``.
    Interleaved: pair ``i`` from stream ``s = i % n`` while ``i < n * sections[s]`` (``n``
    streams), else from stream 0 (Qwen3-VL), e.g. streams ``0, 1, 2, 0, 1, 2, 0`` for
    sections ``[3, 2, 2]`` and ``0, 1, 2, 0, 0, 0`` for ``[4, 1, 1]``.
    """
    if interleaved:
        return _join_interleaved(tables, sections, xp)
    cos_parts, sin_parts = [], []
    start = 0
    for (cos, sin), size in zip(tables, sections, strict=True):
        cos_parts.append(cos[..., start : start + size])
        sin_parts.append(sin[..., start : start + size])
        start += size
    return xp.concat(cos_parts, axis=-1), xp.concat(sin_parts, axis=-1)


def _join_interleaved(
    tables: Sequence[tuple[Array, Array]], sections: Sequence[int], xp: Namespace
) -> tuple[Array, Array]:
    # One gather from the streams stacked pair by pair: entry pair * n + stream.
    count = len(sections)
    index = np.arange(sum(sections), dtype=np.int64) * count
    for stream in range(1, count):
        index[stream : count * sections[stream] : count] += stream
    first = tables[0][0]
    where = xp.asarray(index, device=device_of(first))
    shape = (*first.shape[:-1], index.size * count)
    joined = []
    for part in range(2):
        stacked = xp.stack([table[part] for table in tables], axis=-1)
        joined.append(xp.take(xp.reshape(stacked, shape), where, axis=-1))
    return joined[0], joined[1]
