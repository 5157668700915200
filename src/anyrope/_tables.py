"""cos/sin tables: float64 on the host, rounded once, moved to a device once and cached.

numerics.md, section 2: ``angle = float64(m) * theta``; ``cos``/``sin`` of it times the
attention factor, all in float64 with :func:`anyrope._hostmath.sincos` (the same bits on
every machine), then one rounding to the table dtype.
Every entry depends only on its own position, so a table grown later, a slice of it
and a table built directly for a few positions hold the same bits.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ._hostmath import sincos
from ._namespace import Array, Namespace

MAX_CACHED_ENTRIES = 2**22
"""Cached tables stop growing at this many entries (positions x pairs, 16 MiB in
float32); positions beyond it get tables built for just the positions asked for."""

MIN_CACHED_ROWS = 256

BLOCK_ENTRIES = 8192
"""Entries computed per step: the host math's temporaries stay in the L1/L2 caches."""


def host_tables(
    inv_freq: np.ndarray[Any, Any],
    positions: np.ndarray[Any, Any],
    *,
    attention_factor: float,
    dtype: np.dtype[Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Return ``(cos, sin)`` of shape ``positions.shape + inv_freq.shape`` in ``dtype``.

    ``positions`` are non-negative integers below 2**53, so converting them to
    float64 is exact; the products and the attention factor are float64 too.
    """
    flat = positions.reshape(-1).astype(np.float64)
    cos = np.empty((flat.size, inv_freq.size), dtype=dtype)
    sin = np.empty_like(cos)
    rows = max(1, BLOCK_ENTRIES // max(inv_freq.size, 1))
    for start in range(0, flat.size, rows):
        block = slice(start, start + rows)
        s, c = sincos(flat[block, None] * inv_freq)
        if attention_factor != 1.0:
            s *= attention_factor
            c *= attention_factor
        cos[block] = c
        sin[block] = s
    shape = (*positions.shape, inv_freq.size)
    return cos.reshape(shape), sin.reshape(shape)


class TableCache:
    """Device-resident tables for positions ``0 .. rows-1``, one per (library, device, dtype).

    Tables grow (to the next power of two) when a larger position arrives. A lock
    makes growth safe when several threads share one :class:`anyrope.RoPE`.
    """

    def __init__(self, inv_freq: np.ndarray[Any, Any], attention_factor: float) -> None:
        self._inv_freq = inv_freq
        self._attention_factor = attention_factor
        self._tables: dict[tuple[str, str, str], tuple[Array, Array, int]] = {}
        self._lock = threading.Lock()

    def cacheable(self, rows: int) -> bool:
        """Whether a table of ``rows`` positions is small enough to keep."""
        return bool(rows * self._inv_freq.shape[0] <= MAX_CACHED_ENTRIES)

    def build(
        self, positions: np.ndarray[Any, Any], xp: Namespace, device: Any, dtype: np.dtype[Any]
    ) -> tuple[Array, Array]:
        """Tables for exactly ``positions`` (host integers), moved to ``device``."""
        cos, sin = host_tables(
            self._inv_freq, positions, attention_factor=self._attention_factor, dtype=dtype
        )
        return xp.asarray(cos, device=device), xp.asarray(sin, device=device)

    def get(
        self, rows: int, xp: Namespace, device: Any, dtype: np.dtype[Any]
    ) -> tuple[Array, Array]:
        """Tables covering at least positions ``0 .. rows-1`` on ``device``."""
        key = (xp.__name__, str(device), dtype.name)
        entry = self._tables.get(key)
        if entry is not None and entry[2] >= rows:
            return entry[0], entry[1]
        with self._lock:
            entry = self._tables.get(key)
            if entry is None or entry[2] < rows:
                size = max(MIN_CACHED_ROWS, 1 << max(rows - 1, 0).bit_length())
                if not self.cacheable(size):
                    size = rows
                cos, sin = self.build(np.arange(size, dtype=np.int64), xp, device, dtype)
                entry = (cos, sin, size)
                self._tables[key] = entry
        return entry[0], entry[1]
