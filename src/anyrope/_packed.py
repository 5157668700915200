"""Packed variable-length batches: ``cu_seqlens`` to per-token positions (layout ``"thd"``).

flash-attn, vLLM and TransformerEngine pack a batch of sequences of different lengths
into one ``(total_tokens, heads, head_dim)`` array and describe it by the cumulative
lengths ``cu_seqlens = [0, n0, n0 + n1, ...]``. Each sequence restarts at position 0
(plus an optional per-sequence offset, e.g. the tokens already in its KV cache).

The positions are computed on the host from ``cu_seqlens`` (a handful of integers) and
the packed input is then rotated as one ``"bshd"`` sequence with those positions: every
token sees exactly the table entry and arithmetic it would see in its own sequence, so
the result equals rotating each sequence separately, bit for bit.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ._jax import is_traced
from ._namespace import Array, Namespace, device_of, to_host
from ._offsets import Offsets
from ._positions import check_integer_array
from ._validation import MAX_POSITION, describe


def _host_integers(values: Array, name: str, xp: Namespace, x: Array) -> np.ndarray[Any, Any]:
    check_integer_array(values, name, xp, x)
    if is_traced(values):
        raise TypeError(
            f"with layout='thd', `{name}` must be concrete: its values place every token, and "
            "jax.jit traces it (an argument of the jitted function); close over a concrete "
            "array instead, or pass per-token positions as `positions` without layout='thd'"
        )
    if values.ndim != 1:
        raise ValueError(f"`{name}` must be one-dimensional; got shape {tuple(values.shape)}")
    host = to_host(values)
    # Checked in the array's own dtype: as int64, a uint64 above 2**63 would wrap.
    if host.size and host.max() >= MAX_POSITION:
        raise ValueError(f"`{name}` must be below 2**53; got a maximum of {host.max()}")
    return host.astype(np.int64)


def packed_positions(cu_seqlens: object, offsets: object, *, x: Array, xp: Namespace) -> Array:
    """Per-token positions (shape ``(total_tokens,)``, int64, on the device of ``x``).

    Parameters
    ----------
    cu_seqlens : integer array
        ``(num_sequences + 1,)``: starts at 0, non-decreasing, ends at ``x.shape[0]``.
    offsets : None, int or integer array
        Added to every position of a sequence: ``None`` (0), one int (or 0-d integer
        array) for all, or an array of shape ``(num_sequences,)``.
    x : array
        The packed input ``(total_tokens, heads, head_dim)``.
    """
    if len(x.shape) != 3:
        raise ValueError(
            f"layout='thd' needs a packed input of shape (total_tokens, heads, head_dim); "
            f"got {describe(x)}"
        )
    if cu_seqlens is None:
        raise ValueError("layout='thd' needs `cu_seqlens`, the cumulative sequence lengths")
    cu = _host_integers(cu_seqlens, "cu_seqlens", xp, x)
    total = int(x.shape[0])
    if cu.size < 1 or cu[0] != 0 or np.any(np.diff(cu) < 0) or cu[-1] != total:
        raise ValueError(
            "`cu_seqlens` must start at 0, never decrease and end at the number of tokens "
            f"x.shape[0]={total}; got {cu.tolist() if cu.size <= 16 else describe(cu_seqlens)}"
        )
    count = cu.size - 1
    if isinstance(offsets, Offsets):
        # Packed sequences are the rows here: Offsets says what the bare array says.
        offsets = offsets.values
    # A traced 0-d offset (a decode step under jax.jit) is added in the graph; the
    # positions it gives are checked where they are used, as traced positions are.
    traced = getattr(offsets, "ndim", None) == 0 and is_traced(offsets)
    if traced:
        check_integer_array(offsets, "positions", xp, x)
    starts = _offsets(None if traced else offsets, count, xp, x)
    sequence = np.repeat(np.arange(count), np.diff(cu))  # the sequence of each token
    positions = np.arange(total, dtype=np.int64) - cu[:-1][sequence] + starts[sequence]
    if positions.size and positions.max() >= MAX_POSITION:
        raise ValueError(
            "`positions` (per-sequence offsets) plus sequence lengths must stay below 2**53; "
            f"got a maximum position of {positions.max()}"
        )
    packed = xp.asarray(positions, device=device_of(x))
    return packed + xp.astype(offsets, packed.dtype) if traced else packed


def _offsets(offsets: object, count: int, xp: Namespace, x: Array) -> np.ndarray[Any, Any]:
    if offsets is None:
        return np.zeros(count, dtype=np.int64)
    if isinstance(offsets, (bool, float, list, tuple)):
        raise TypeError(
            "with layout='thd', `positions` must be None, an integer offset or an integer "
            f"array of per-sequence offsets; got {type(offsets).__name__}"
        )
    if not isinstance(offsets, numbers.Integral) and getattr(offsets, "ndim", None) == 0:
        # A 0-d array is an offset, as everywhere: the same for every sequence.
        check_integer_array(offsets, "positions", xp, x)
        offsets = int(to_host(offsets))
    if isinstance(offsets, numbers.Integral):
        if int(offsets) < 0:
            raise ValueError(f"`positions` offset must be non-negative; got {int(offsets)}")
        if int(offsets) >= MAX_POSITION:
            raise ValueError(f"`positions` offset must be below 2**53; got {int(offsets)}")
        return np.full(count, int(offsets), dtype=np.int64)
    host = _host_integers(offsets, "positions", xp, x)
    if host.shape != (count,):
        raise ValueError(
            f"with layout='thd', `positions` holds one offset per sequence: shape ({count},) for "
            f"{count + 1} cu_seqlens entries; got shape {host.shape}"
        )
    if host.size and host.min() < 0:
        raise ValueError(f"`positions` offsets must be non-negative; got a minimum of {host.min()}")
    return host
