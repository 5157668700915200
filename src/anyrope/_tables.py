"""cos/sin tables: float64 on the host, rounded once, moved to a device once and cached.

numerical-contract.rst, "How every path computes" 2: ``angle = float64(m) * theta``; ``cos``/``sin``
of it times the attention factor (and, for xPos, the amplitude of :mod:`anyrope._amplitude`), all in
float64 with :mod:`anyrope._hostmath` (the same bits on every machine), then one rounding to the
table dtype. Every entry depends only on its own position, so a table grown later, a slice of it and
a table built directly for a few positions hold the same bits.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import array_api_compat
import numpy as np

from ._amplitude import Amplitude
from ._hostmath import FAST_REDUCTION_LIMIT, sincos
from ._namespace import Array, Namespace, device_of, from_host, outside_trace, reshape_lead, to_host
from ._positions import Positions, host_positions
from ._threads import lock
from ._validation import MAX_POSITION
from .scaling import RopeScaling
from .scaling._types import FloatArray

MAX_CACHED_ENTRIES = 2**22
"""Cached tables stop growing at this many entries (positions x pairs, 16 MiB in
float32). Positions beyond them are served from windows (see :data:`WINDOW_ENTRIES`),
which hold this many entries in all; a call whose positions span more gets tables built
for just the positions asked for."""

WINDOW_ENTRIES = 2**14
"""Entries a window of rows past the cached tables holds at least (256 positions at
head_dim 128): a window starts at the lowest position a call asks for, so decoding
builds one every 256 tokens or so, whatever the offset, and a call never builds more
than its own rows and this many. Rows whose angles need the exact far reduction of
:mod:`anyrope._hostmath` (past ``2**33`` radians: microseconds an entry) get no rows
ahead: a window of just the rows asked for."""

MAX_WINDOWS = 8
"""Windows kept per table cache, over every library, device and dtype: sequences decoded
in turn (a batch of requests at their own offsets) each keep theirs. The oldest goes
first."""

MIN_CACHED_ROWS = 256

MAX_PLANS = 64
"""Geometries whose plans a table source keeps; all are forgotten when it is full."""

AHEAD = 256
"""Lengths whose dynamic-NTK frequencies are computed together (see TableSource)."""

AHEAD_BLOCKS = 4
"""Blocks of :data:`AHEAD` lengths a table source keeps."""

MAX_LENGTH_BUCKETS = 8
"""Frequency sets kept per table source for length-dependent scaling (LongRoPE; dynamic
NTK keeps blocks of lengths instead); the oldest one is dropped first."""

BLOCK_ENTRIES = 8192
"""Entries computed per step: the host math's temporaries stay in the L1/L2 caches."""


def host_tables(
    inv_freq: np.ndarray[Any, Any],
    positions: np.ndarray[Any, Any],
    *,
    attention_factor: float,
    dtype: np.dtype[Any],
    amplitude: Amplitude | None = None,
    undo: bool = False,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Return ``(cos, sin)`` of shape ``positions.shape + inv_freq.shape`` in ``dtype``.

    ``positions`` are non-negative integers below 2**53, so converting them to
    float64 is exact; the products, the attention factor and the ``amplitude`` of each
    position and pair (xPos) are float64 too. ``undo`` divides by the attention factor
    instead of multiplying (the tables that undo a rotation).
    """
    flat = positions.reshape(-1).astype(np.float64)
    cos, sin = np.empty((2, flat.size, inv_freq.size), dtype=dtype)
    rows = max(1, BLOCK_ENTRIES // max(inv_freq.size, 1))
    # Far from the center an xPos amplitude leaves the float range (inf or 0, as in the
    # peers' tables); cached rows beyond a call's positions may hold such values.
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, flat.size, rows):
            block = slice(start, start + rows)
            pair = sincos(flat[block, None] * inv_freq)
            scale = None if amplitude is None else amplitude(flat[block])
            for t, out in zip(pair, (sin, cos), strict=True):
                if attention_factor != 1.0:
                    # The tables of inverse=True: cos/a and sin/a, one float64 division.
                    (np.true_divide if undo else np.multiply)(t, attention_factor, out=t)
                if scale is not None:
                    np.multiply(t, scale, out=t)
                out[block] = t
    shape = (*positions.shape, inv_freq.size)
    return cos.reshape(shape), sin.reshape(shape)


_generation = 0
"""Counts the cached tables ever built (and the caches cleared) in this process: a holder
of many sources (the functional API) re-measures their bytes, and the CUDA path looks up
its tables again, only when it has changed."""


def generation() -> int:
    """How many cached tables this process has built (and caches cleared) so far."""
    return _generation


class Rows(NamedTuple):
    """Tables indexed by row and what selects the rows of one call (a named tuple: made
    for every call, cheaply).

    ``row_of is None``: the call's positions are the consecutive rows ``offset ..``;
    otherwise ``row_of`` (an int32 or int64 array of the caller's library, shape of the
    positions) holds the row of each position. Also the record of the tables a plan
    carries in every form (:data:`anyrope._plan.TABLE_FORMS`): those of every token have
    ``row_of`` ``None`` and ``offset`` 0.
    """

    cos: Array
    sin: Array
    row_of: Array | None
    offset: int


def widen(cos: Array, sin: Array, interleaved: bool, xp: Namespace) -> tuple[Array, Array]:
    """Tables over every rotated feature: ``cos`` for both elements of a pair, and for
    each element the sine its partner is multiplied by (``-sin`` for the first element).

    Half-split: ``[c, c]`` and ``[-s, s]``; interleaved: ``[c0, c0, c1, c1, ...]`` and
    ``[-s0, s0, -s1, s1, ...]``. Then ``y = x * cos_wide + swap(x) * sin_wide``, where
    ``swap`` exchanges the two elements of each pair, gives the bits of the reference:
    ``x1 * (-s)`` is exactly ``-(x1 * s)`` and ``a + (-b)`` is exactly ``a - b``.
    """
    # Concrete tables stay concrete inside a jax.jit trace: the caches keep them.
    with outside_trace(xp):
        if not interleaved:
            return xp.concat((cos, cos), axis=-1), xp.concat((-sin, sin), axis=-1)
        shape = (*cos.shape[:-1], 2 * cos.shape[-1])
        return (
            xp.reshape(xp.stack((cos, cos), axis=-1), shape),
            xp.reshape(xp.stack((-sin, sin), axis=-1), shape),
        )


def gather_rows(
    cos: Array, sin: Array, positions: Array, bound: int, xp: Namespace
) -> tuple[Array, Array]:
    """Rows ``positions`` of the tables, gathered inside the graph (shape
    ``positions.shape + (pairs,)``), for every library and graph (traced, lazy, captured,
    exported): nothing reads the positions on the host, whatever their shape. A position
    outside ``0 .. bound - 1`` gets a row of NaN, never a wrong rotation."""
    inside = (positions >= 0) & (positions < bound)
    if array_api_compat.is_jax_array(positions):
        from ._jax import take_filled  # keeps the sharding of positions

        rows = xp.where(inside, positions, cos.shape[0])
        return take_filled(cos, rows), take_filled(sin, rows)
    flat, inside = xp.reshape(positions, (-1,)), xp.reshape(inside, (-1, 1))
    flat = xp.where(inside[:, 0], flat, xp.zeros_like(flat))
    nan = xp.asarray(math.nan, dtype=cos.dtype, device=device_of(cos))
    picked = (xp.where(inside, xp.take(t, flat, axis=0), nan) for t in (cos, sin))
    pairs = (cos.shape[-1],)
    cos, sin = (reshape_lead(t, positions, positions.ndim, pairs, xp) for t in picked)
    return cos, sin


def _memo(  # noqa: PLR0917 - where, which entry, then how it is made and kept
    lock: Any,
    store: dict[Any, Any],
    key: Any,
    fits: Callable[[Any], bool],
    make: Callable[[], Any],
    bound: float = math.inf,
) -> Any:
    """The entry of ``store`` at ``key`` if it ``fits``, else one made (under ``lock``,
    once however many threads ask) and kept there, the oldest entries dropped past
    ``bound``; counted by :func:`generation`."""
    global _generation  # noqa: PLW0603 - a process-wide count, read by generation()
    entry = store.get(key)
    if entry is None or not fits(entry):
        with lock:
            entry = store.get(key)
            if entry is None or not fits(entry):
                entry = store[key] = make()
                _generation += 1
                while len(store) > bound:
                    del store[next(iter(store))]
    return entry


def _held_bytes(*held: dict[Any, Any]) -> int:
    """Bytes of the ``(cos, sin, ...)`` entries of table dicts keyed ``(library, device,
    dtype, ...)``; copied first, as other threads may add to them."""
    entries = [(key[2], entry[0]) for tables in held for key, entry in list(tables.items())]
    return sum(2 * math.prod(cos.shape) * dtype.itemsize for dtype, cos in entries)


Window = tuple[Array, Array, int]
"""Rows of tables past the cached ones: ``(cos, sin, start)``, row 0 the position ``start``."""


def _window_holds(entry: Window, low: int, stop: int) -> bool:
    """Whether a window ``(cos, sin, start)`` holds positions ``low .. stop - 1``."""
    return entry[2] <= low and stop <= entry[2] + entry[0].shape[0]


def _moved(tables: tuple[FloatArray, ...], xp: Namespace, device: Any) -> tuple[Array, Array]:
    """Host tables ``(cos, sin)`` on ``device``; concrete even inside a jax.jit trace: the
    caches keep them past the trace."""
    with outside_trace(xp):
        return from_host(tables[0], xp, device), from_host(tables[1], xp, device)


def _holds(block: TableCache, stop: int) -> bool:
    """Whether the length ``stop`` is one of those of ``block``."""
    return block.first < stop <= block.first + int(block.inv_freq.shape[0])


class TableCache:
    """Device-resident tables for positions ``0 .. rows-1``, one per (library, device, dtype).

    Tables grow (to the next power of two) when a larger position arrives, up to
    :data:`MAX_CACHED_ENTRIES`; beyond, a window of rows follows the calls. A lock makes
    growth safe when several threads share one source.

    Dynamic NTK past the context (see :meth:`TableSource._block`): a *block* holds, in
    ``ahead``, the host float64 rows of consecutive decoding steps, row ``r`` the position
    :attr:`first` ``+ r`` with the frequencies of the length ``first + r + 1`` (``inv_freq``
    has one row per length); each library, device and dtype gets them rounded and moved
    once per block. The cache of one of its lengths (:meth:`length`) serves the last
    position of that length from the block's tables, and builds any other position asked
    for on the spot. Row ``r`` of the tables that :meth:`get` returns is position
    :attr:`first` ``+ r``; in a block, only the row of :attr:`position` has this cache's
    frequencies.
    """

    _tables: dict[tuple[str, str, np.dtype[Any]], tuple[Array, Array, int]]
    _wide: dict[tuple[str, str, np.dtype[Any], bool], tuple[Array, Array, int]]
    _lock: Any

    def __init__(
        self,
        inv_freq: FloatArray,
        attention_factor: float,
        *,
        amplitude: Amplitude | None = None,
        undo: bool = False,
        capacity: int = 0,
        ahead: tuple[FloatArray, ...] = (),
        first: int = 0,
        block: TableCache | None = None,
        position: int = -1,
    ) -> None:
        self.inv_freq = inv_freq
        self.attention_factor = attention_factor
        self.amplitude = amplitude
        self.undo = undo
        """Whether the tables divide by the attention factor (those of inverse=True)."""
        self.capacity = capacity
        """Rows built at once, at the first use on a device (``max_positions``), even
        beyond :data:`MAX_CACHED_ENTRIES`; 0 for none."""
        self.block = block
        """The block whose tables serve the one :attr:`position` of a length's cache: its
        rows, tables, wide tables and lock are the block's."""
        self.ahead: tuple[FloatArray, ...] = ahead if block is None else block.ahead
        """A block's host rows ``(cos, sin)``, float64 (empty for any other cache)."""
        self.first: int = first if block is None else block.first
        """The position of row 0 of the cached tables."""
        self.position = position
        """The one position a length's cache serves from its block (-1 for others)."""
        self._tables = {} if block is None else block._tables
        self._wide = {} if block is None else block._wide
        self._windows: OrderedDict[tuple[str, str, np.dtype[Any], int], Window] = OrderedDict()
        self._reach = MIN_CACHED_ROWS
        """Rows of the largest tables from position 0 built so far (at least
        :data:`MIN_CACHED_ROWS`): calls that start within them grow them (see
        :meth:`covers`)."""
        self._lock = lock() if block is None else block._lock

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached tables (cos and sin, every library, device and dtype)."""
        undoing = self.__dict__.get("undoing", self)
        held = _held_bytes(self._tables, self._wide, self._windows)
        return held + (0 if undoing is self else undoing.nbytes)

    def clear(self) -> None:
        """Drop every cached table but those of a capacity, which stay while their RoPE
        lives: a captured graph (a CUDA graph, an exported program) holds their address."""
        global _generation  # noqa: PLW0603 - a process-wide count, read by generation()
        with self._lock:
            self._windows.clear()
            if not self.capacity:
                self._tables.clear()
                self._wide.clear()
                self.__dict__.pop("undoing", None)
                self._reach = MIN_CACHED_ROWS
            _generation += 1

    @functools.cached_property
    def undoing(self) -> TableCache:
        """The tables that undo this cache's rotation (numerical-contract.rst, "How every path
        computes" 4).

        A rotation by ``a * R(angle)`` is undone by ``R(-angle) / a``: tables of ``cos/a``
        and ``sin/a``, divided in float64 on the host and rounded once (the path flips
        the sign of sin). With ``a == 1`` these are this cache's own tables. The
        frequencies of a dynamic-NTK length have ``a == 1``, so a length's cache is its
        own undoing.
        """
        if self.attention_factor == 1.0 or self.undo:
            return self
        return TableCache(
            self.inv_freq,
            self.attention_factor,
            amplitude=self.amplitude,
            undo=True,
            capacity=self.capacity,
        )

    def length(self, stop: int) -> TableCache:
        """The cache of the length ``stop``, one of this block's: its frequencies, and its
        last position served from the block's tables (one decoding step)."""
        freq, factor = self.inv_freq[stop - 1 - self.first], self.attention_factor
        return TableCache(freq, factor, block=self, position=stop - 1)

    def covers(self, where: Positions) -> bool:
        """Whether the cached tables serve ``where`` (concrete positions): positions
        ``0 .. stop-1`` small enough to keep, or the one row of a length's cache."""
        if where.traced:
            return False
        if self.block is None:
            if self.capacity:
                # Tables of a capacity never grow (nor move): a CUDA graph captured
                # with their address stays valid; positions past them get windows.
                return where.stop <= self.capacity
            if where.stop * self.inv_freq.size > MAX_CACHED_ENTRIES:
                return False
            # The tables from position 0 double as calls walk past their end (each row
            # built once, paid for by the calls that reach it). A range that starts
            # beyond them gets a window of its own rows instead: a fresh RoPE asked for
            # position 60,000 (an int, or position_ids holding one range) builds hundreds
            # of rows, not 65,536. Rows scattered by an array grow them as before.
            return where.array is not None or where.offset <= self._reach
        return where.array is None and where.offset == self.position and where.seq == 1

    def host(self, positions: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> tuple[FloatArray, ...]:
        """Host tables for exactly ``positions`` (host integers), in ``dtype``."""
        block = self.block
        if block is not None and positions.size and (positions == self.position).all():
            # The row computed ahead (TableSource._block), for every position asked.
            return tuple(t[positions - self.first].astype(dtype) for t in self.ahead)
        return host_tables(
            self.inv_freq,
            positions,
            attention_factor=self.attention_factor,
            dtype=dtype,
            amplitude=self.amplitude,
            undo=self.undo,
        )

    def build(
        self, positions: np.ndarray[Any, Any], xp: Namespace, device: Any, dtype: np.dtype[Any]
    ) -> tuple[Array, Array]:
        """:meth:`host` tables moved to ``device``."""
        return _moved(self.host(positions, dtype), xp, device)

    def get(
        self, stop: int, xp: Namespace, device: Any, dtype: np.dtype[Any]
    ) -> tuple[Array, Array]:
        """Tables covering at least positions :attr:`first` ``.. stop-1`` on ``device``
        (a length's cache: its block's tables, of which it serves row ``stop - 1 - first``).
        """
        key = (xp.__name__, str(device), dtype)
        held = self._tables.get(key)
        if held is not None and held[2] >= stop:  # most calls: no closure made, no lock
            return held[0], held[1]

        def grown() -> tuple[Array, Array, int]:
            if self.ahead:  # a block: its rows as computed, rounded once
                rows = tuple(t.astype(dtype) for t in self.ahead)
                return (*_moved(rows, xp, device), self.first + len(rows[0]))
            size = max(MIN_CACHED_ROWS, self.capacity, 1 << max(stop - 1, 0).bit_length())
            if size > self.capacity and size * self.inv_freq.size > MAX_CACHED_ENTRIES:
                size = max(stop, self.capacity)
            self._reach = max(self._reach, size)
            return (*self.build(np.arange(size, dtype=np.int64), xp, device, dtype), size)

        cos, sin, _ = _memo(self._lock, self._tables, key, lambda e: e[2] >= stop, grown)
        return cos, sin

    def get_wide(
        self, stop: int, xp: Namespace, device: Any, dtype: np.dtype[Any], interleaved: bool
    ) -> tuple[Array, Array]:
        """:func:`widen` of :meth:`get`, cached (a length's cache: its block's)."""
        cos, sin = self.get(stop, xp, device, dtype)
        key = (xp.__name__, str(device), dtype, interleaved)
        rows = int(cos.shape[0])
        wide = _memo(
            self._lock,
            self._wide,
            key,
            lambda e: e[2] >= rows,
            lambda: (*widen(cos, sin, interleaved, xp), rows),
        )
        return wide[0], wide[1]

    def rows(self, where: Positions, xp: Namespace, device: Any, dtype: np.dtype[Any]) -> Rows:
        """The rows for ``where`` (not traced): cached tables when small enough, else
        tables built for just the positions asked for (an array is then replaced by the
        indices of its distinct values)."""
        if self.covers(where):
            # Arrays index rows from position 0: a length's cache (first row elsewhere)
            # covers a range only.
            cos, sin = self.get(where.stop, xp, device, dtype)
            return Rows(cos, sin, where.array, where.offset - self.first)
        if where.array is None:
            window = self._window(where.offset, where.stop, where.seq, xp, device, dtype)
            if window is not None:
                cos, sin, start = window
                return Rows(cos, sin, None, where.offset - start)
            rows = np.arange(where.offset, where.stop, dtype=np.int64)
            cos, sin = self.build(rows, xp, device, dtype)
            return Rows(cos, sin, None, 0)
        host = to_host(where.array).astype(np.int64)
        window = None
        if host.size:
            low, stop = int(host.min()), int(host.max()) + 1
            window = self._window(low, stop, host.size, xp, device, dtype)
        if window is not None:
            cos, sin, start = window
            return Rows(cos, sin, xp.asarray(host - start, device=device), 0)
        distinct, index = np.unique(host, return_inverse=True)
        cos, sin = self.build(distinct, xp, device, dtype)
        return Rows(cos, sin, xp.asarray(index.reshape(host.shape), device=device), 0)

    def _window(  # noqa: PLR0917 - the rows, then where the tables go
        self, low: int, stop: int, asked: int, xp: Namespace, device: Any, dtype: np.dtype[Any]
    ) -> Window | None:
        """Cached rows ``start .. start + n - 1`` holding the ``asked`` positions of a call,
        ``low .. stop - 1``, as ``(cos, sin, start)``; ``None`` when they span more than
        :data:`MAX_CACHED_ENTRIES`, or far rows (see :data:`WINDOW_ENTRIES`) more than
        twice the positions asked for (or the cache is a length's: its one position is
        served otherwise).

        A missing window is built from ``low`` on: the rows asked for and, unless their
        angles are far, rows ahead up to :data:`WINDOW_ENTRIES` entries. The work of a
        call is its own rows and at most that many more, at any offset; the oldest
        windows are dropped.
        """
        global _generation  # noqa: PLW0603 - a process-wide count, read by generation()
        pairs = max(self.inv_freq.size, 1)
        if self.block is not None or (stop - low) * pairs > MAX_CACHED_ENTRIES:
            return None
        library, where = xp.__name__, str(device)
        for key, entry in list(self._windows.items())[::-1]:  # the newest first
            if key[:3] == (library, where, dtype) and _window_holds(entry, low, stop):
                return entry
        fastest = float(np.max(self.inv_freq)) if self.inv_freq.size else 0.0
        near = float(stop + WINDOW_ENTRIES // pairs) * fastest < FAST_REDUCTION_LIMIT
        if not near and stop - low > 2 * asked:
            return None
        with self._lock:
            for key, entry in list(self._windows.items())[::-1]:
                if key[:3] == (library, where, dtype) and _window_holds(entry, low, stop):
                    return entry
            size = stop - low
            if near:
                size = max(size, WINDOW_ENTRIES // pairs)
            start = max(0, min(low, MAX_POSITION - size))
            positions = np.arange(start, start + size, dtype=np.int64)
            entry = (*self.build(positions, xp, device, dtype), start)
            windows = self._windows
            windows.pop((library, where, dtype, start), None)
            windows[(library, where, dtype, start)] = entry
            while len(windows) > 1 and (
                len(windows) > MAX_WINDOWS
                or sum(int(e[0].shape[0]) for e in windows.values()) * pairs > MAX_CACHED_ENTRIES
            ):
                windows.popitem(last=False)
            _generation += 1
        return entry

    def gather(
        self, where: Positions, xp: Namespace, device: Any, dtype: np.dtype[Any]
    ) -> tuple[Array, Array]:
        """cos/sin of shape ``(*batch', seq, pairs)`` (``(seq, pairs)`` for a range).

        Positions left unread are gathered inside the graph from the tables of a
        capacity (:func:`gather_rows`); traced positions without one get their tables from
        a host callback when the compiled function runs."""
        if where.unread:
            cos, sin = self.get(where.stop, xp, device, dtype)
            return gather_rows(cos, sin, where.array, where.stop, xp)
        if where.traced and where.array is not None:
            from ._jax import when_run

            def checked(values: np.ndarray[Any, Any]) -> tuple[FloatArray, ...]:
                # Out-of-range positions cannot be reported while tracing: JAX re-raises
                # this when the compiled function runs.
                return self.host(host_positions(values), dtype)

            table = ((*where.array.shape, self.inv_freq.size), dtype)
            cos, sin = when_run(checked, where.array, (table, table))
            return cos, sin
        # The rows selected: offset .. offset + seq - 1, or those row_of names.
        cos, sin, index, offset = self.rows(where, xp, device, dtype)
        if index is None:
            return cos[offset : offset + where.seq, ...], sin[offset : offset + where.seq, ...]
        flat, shape = xp.reshape(index, (-1,)), (*index.shape, cos.shape[-1])
        cos, sin = (xp.reshape(xp.take(t, flat, axis=0), shape) for t in (cos, sin))
        return cos, sin


class TableSource:
    """The frequencies of one RoPE and their tables, per length bucket.

    What every path receives instead of the :class:`anyrope.RoPE`: ``rotary_dim``,
    ``sections`` (pairs per position stream) and the tables of the frequencies that a
    sequence reaching a given position uses. Length-dependent scaling (LongRoPE) keeps
    one :class:`TableCache` per length bucket, at most :data:`MAX_LENGTH_BUCKETS`;
    dynamic NTK, whose every length past the context is a bucket, keeps
    :data:`AHEAD_BLOCKS` blocks of lengths instead (see :class:`TableCache`). Pickles and
    deep-copies without its tables.

    ``amplitude`` (xPos) multiplies the tables of each position and pair; it takes
    frequencies that do not depend on the length. ``max_positions`` sizes the tables
    ahead (see :attr:`unread_bound`).
    """

    def __init__(
        self,
        scaling: RopeScaling,
        rotary_dim: int,
        base: float,
        amplitude: Amplitude | None = None,
        max_positions: int | None = None,
    ) -> None:
        # XPos takes no scaling: its frequencies never depend on the length.
        assert amplitude is None or not scaling.depends_on_length, scaling.rope_type
        self.scaling = scaling
        self.amplitude = amplitude
        self.rotary_dim = rotary_dim
        self.base = base
        self.sections = scaling.sections(rotary_dim)
        self.axial = scaling.rope_type == "axial"
        self.depends_on_length = scaling.depends_on_length
        self._default_bucket = scaling.length_bucket(None)
        self.max_positions = max_positions
        self.unread_bound = None if self.depends_on_length else max_positions
        """How far position arrays may go unread: device arrays (a sync avoided), and
        those whose values the host cannot read (traced, lazy, captured), gathered
        inside the graph. The rows the tables hold from the first call on:
        ``max_positions``. ``None`` when every array must be read (no ``max_positions``,
        or frequencies chosen by the largest position); not the model's
        ``max_position_embeddings``, which a model may run past."""
        self.default = TableCache(
            *self.frequencies(None), amplitude=amplitude, capacity=max_positions or 0
        )
        self._buckets: OrderedDict[int, TableCache] = OrderedDict()
        self._every_length = scaling.frequencies_change_with_every_length
        self._ahead: OrderedDict[int, TableCache] = OrderedDict()
        self._last: TableCache | None = None
        """The cache of the latest length past the context; its block holds the next
        token's, usually."""
        self._lock = lock()
        self.plans: dict[Hashable, Any] = {}
        """Plans of earlier calls by their geometry, for the pipeline to reuse."""

    def remember(self, key: Hashable, entry: Any) -> None:
        """Keep a plan (and its path) for calls of the geometry ``key``."""
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        self.plans[key] = entry

    def frequencies(self, seq_len: int | None) -> tuple[FloatArray, float]:
        """``(inv_freq, attention_factor)`` for a sequence of ``seq_len`` positions."""
        inv_freq, factor = self.scaling.frequencies(self.rotary_dim, self.base, seq_len=seq_len)
        inv_freq.flags.writeable = False
        return inv_freq, factor

    def for_length(self, stop: int) -> TableCache:
        """The tables of a sequence whose largest position is ``stop - 1``."""
        if not self.depends_on_length:
            return self.default
        bucket = self.scaling.length_bucket(stop)
        if bucket == self._default_bucket:
            return self.default
        if self._every_length:
            return self._one_length(stop)
        made = lambda: TableCache(*self.frequencies(stop))  # noqa: E731 - made on a miss only
        cache: TableCache = _memo(self._lock, self._buckets, bucket, bool, made, MAX_LENGTH_BUCKETS)
        return cache

    def _one_length(self, stop: int) -> TableCache:
        """Tables for a sequence of exactly ``stop`` positions (dynamic NTK).

        Decoding past the trained context meets ``stop``, ``stop + 1``, ... one per
        token, each with its own frequencies, and usually asks for its last position
        only. The frequencies and that last row of :data:`AHEAD` lengths are computed
        at once (a block, see :class:`TableCache`), element by element as one length would be,
        and rounded to a table once: a token costs a lookup and picks its row. The
        layers of one token share its cache.
        """
        last = self._last
        if last is not None and last.position == stop - 1:
            return last
        block = None if last is None else last.block
        if block is None or not _holds(block, stop):
            with self._lock:
                # The newest first: the next token's. A few blocks are kept: decoding again
                # from an earlier token (a new sample, a beam) finds its block still there.
                kept = (b for b in reversed(self._ahead.values()) if _holds(b, stop))
                block = next(kept, None) or self._block(stop)
        cache = self._last = block.length(stop)
        return cache

    def _block(self, stop: int) -> TableCache:
        """The block of the :data:`AHEAD` lengths from ``stop`` on, kept; lock held."""
        lengths = np.arange(stop, stop + AHEAD, dtype=np.int64)
        lengths = lengths[lengths <= MAX_POSITION]
        many, factor = self.scaling.frequencies_per_length(self.rotary_dim, self.base, lengths)
        many.flags.writeable = False
        # The last position of each length, exactly as host_tables computes it.
        s, c = sincos((lengths - 1).astype(np.float64)[:, None] * many)
        if factor != 1.0:
            s *= factor
            c *= factor
        block = self._ahead[stop] = TableCache(many, factor, ahead=(c, s), first=stop - 1)
        if len(self._ahead) > AHEAD_BLOCKS:
            self._ahead.popitem(last=False)
        return block

    @property
    def nbytes(self) -> int:
        """Bytes held by every cached table of this source."""
        caches = [self.default, *self._buckets.values(), *self._ahead.values()]
        return sum(cache.nbytes for cache in caches)

    def clear(self) -> None:
        """Drop every cached table (they are rebuilt, with the same bits, when needed)."""
        with self._lock:
            self._buckets.clear()
            self._ahead.clear()
            self._last = None
            self.plans.clear()
        self.default.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its settings; see shared_source.
        settings = (self.scaling, self.rotary_dim, self.base, self.amplitude, self.max_positions)
        return (shared_source, settings)


SHARED_SOURCES = 8
"""Unpickled table sources kept per process, so that the blocks of one dask graph that a
worker unpickles one by one share their tables."""


@functools.lru_cache(maxsize=SHARED_SOURCES)
def shared_source(
    scaling: RopeScaling,
    rotary_dim: int,
    base: float,
    amplitude: Amplitude | None = None,
    max_positions: int | None = None,
) -> TableSource:
    """The :class:`TableSource` of these settings that this process keeps for unpickling."""
    return TableSource(scaling, rotary_dim, base, amplitude, max_positions)
