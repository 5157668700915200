"""The :class:`XPos` object: RoPE whose queries and keys carry a decaying amplitude."""

from __future__ import annotations

from typing import Any

from . import _pipeline
from ._amplitude import Amplitude, xpos_zeta
from ._namespace import Array, Namespace
from ._tables import TableSource
from ._validation import (
    MAX_POSITION,
    check_base,
    check_bool,
    check_head_dim,
    check_int,
    check_rotary_dim,
)
from .scaling import RopeScaling

MAX_SCALE_BASE = 2**40
"""``scale_base`` stays below this: the exponent's denominator of the host power."""


class XPos:
    """Rotary embedding with xPos amplitudes: a per-pair decay with the distance.

    Sun et al. 2022 (arXiv 2212.10554), as rotary-embedding-torch
    (``RotaryEmbedding(dim, use_xpos=True, xpos_scale_base=...)``) and flash-attn
    (``RotaryEmbedding(dim, scale_base=...)``) implement it. Pair ``i`` of a query at
    position ``m`` is rotated as by :class:`RoPE` and multiplied by

    ``a_i(m) = zeta_i ** ((m - center) / scale_base)``,
    ``zeta_i = (2i + 0.4 d) / (1.4 d)``, ``d = rotary_dim``;

    the same pair of a key is rotated and divided by ``a_i(m)``. A query at ``m`` and a
    key at ``n`` then meet with the factor ``zeta_i ** ((m - n) / scale_base)`` on pair
    ``i``: it depends on ``m - n`` only, so ``center`` does not change the attention; it
    only keeps the amplitudes in float range. The amplitude is part of the float64
    cos/sin tables, rounded once (as the attention factor of :class:`RoPE`): every path
    and backend gives the same bits.

    Amplitudes leave the float range far from ``center``: for float32 tables (inputs of
    16 and 32 bits) once ``|m - center| * 1.2528 / scale_base`` passes about 88 (the
    smallest ``zeta_0 = 2/7``; about 36,000 positions for ``scale_base=512``), 709 for
    float64. Keys are then infinite and queries 0, as in the peers' tables.

    Parameters
    ----------
    head_dim : int
        Width of each attention head (the last axis of q and k); positive and even.
    scale_base : int, optional
        The positive integer ``scale_base`` (flash-attn's ``scale_base``,
        rotary-embedding-torch's ``xpos_scale_base``), below ``2**40``. Default 512.
    center : int, optional
        The position whose amplitude is 1, a non-negative integer below ``2**53``.
        Default 0. The peers center at ``seq_len // 2``: rotary-embedding-torch at the
        length of each call, flash-attn at the length of its cached tables.
    rotary_dim : int, optional
        Number of leading features that rotate (and scale); the rest are copied bit for
        bit. Positive, even and at most ``head_dim``. Defaults to ``head_dim``.
    base : float, optional
        Base of the frequencies ``theta_i = base ** (-2i / rotary_dim)``; finite and
        greater than 1. Default 10000.
    interleaved : bool, optional
        ``False`` (default): pairs ``(x[i], x[i + rotary_dim/2])`` (flash-attn's default);
        ``True``: pairs ``(x[2i], x[2i+1])`` (rotary-embedding-torch).

    Attributes
    ----------
    inv_freq : numpy.ndarray
        float64 frequencies ``theta_i``, shape ``(rotary_dim // 2,)``.
    zeta : numpy.ndarray
        float64 per-pair bases ``zeta_i``, shape ``(rotary_dim // 2,)``, each the exact
        fraction ``(10 i + 2 d) / (7 d)`` rounded once.

    See Also
    --------
    RoPE : The rotation without amplitudes.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> xpos = anyrope.XPos(64, scale_base=512)
    >>> q = np.ones((1, 5, 8, 64))                     # (batch, seq, heads, head_dim)
    >>> k = np.ones((1, 5, 2, 64))
    >>> q2, k2 = xpos(q, k)
    >>> q2.shape, k2.shape
    ((1, 5, 8, 64), (1, 5, 2, 64))
    >>> bool(np.all(q2[0, 0] == q[0, 0]))              # position 0 = center: no change
    True
    >>> def score(m, n):                                # q at m meets k at n
    ...     qm = xpos.rotate_queries(q[:, :1], positions=m)
    ...     kn = xpos.rotate_keys(k[:, :1], positions=n)
    ...     return float(np.sum(qm[0, 0, 0] * kn[0, 0, 0]))
    >>> bool(np.isclose(score(3, 1), score(1003, 1001)))
    True
    """

    def __init__(
        self,
        head_dim: int,
        *,
        scale_base: int = 512,
        center: int = 0,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        interleaved: bool = False,
    ) -> None:
        self.head_dim = check_head_dim(head_dim)
        self.rotary_dim = (
            self.head_dim if rotary_dim is None else check_rotary_dim(rotary_dim, self.head_dim)
        )
        self.scale_base = check_int(scale_base, "scale_base")
        if not 0 < self.scale_base < MAX_SCALE_BASE:
            raise ValueError(
                f"`scale_base` must be a positive integer below 2**40; got {self.scale_base}"
            )
        self.center = check_int(center, "center")
        if not 0 <= self.center < MAX_POSITION:
            raise ValueError(
                f"`center` must be a non-negative integer below 2**53; got {self.center}"
            )
        self.base = check_base(base)
        self.interleaved = check_bool(interleaved, "interleaved")
        self._queries, self._keys = (
            TableSource(
                RopeScaling(),
                rotary_dim=self.rotary_dim,
                base=self.base,
                amplitude=Amplitude(self.rotary_dim, self.scale_base, self.center, sign),
            )
            for sign in (1, -1)
        )
        self.inv_freq = self._queries.default.inv_freq
        self.zeta = xpos_zeta(self.rotary_dim)

    @property
    def cache_nbytes(self) -> int:
        """Number of bytes held by the cached cos/sin tables of queries and keys.

        Returns
        -------
        int
            Bytes of cos and sin tables, 0 after :meth:`clear_cache`.
        """
        return self._queries.nbytes + self._keys.nbytes

    def clear_cache(self) -> None:
        """Drop the cached tables; they are rebuilt (the same bits) when needed."""
        self._queries.clear()
        self._keys.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings; tables are rebuilt where they are needed.
        return (
            _restore,
            (
                type(self),
                self.head_dim,
                self.scale_base,
                self.center,
                self.rotary_dim,
                self.base,
                self.interleaved,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"XPos(head_dim={self.head_dim}, scale_base={self.scale_base}, "
            f"center={self.center}, rotary_dim={self.rotary_dim}, base={self.base!r}, "
            f"interleaved={self.interleaved})"
        )

    def __call__(
        self,
        q: Array,
        k: Array,
        positions: object = None,
        *,
        layout: str = "bshd",
        inverse: bool = False,
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> tuple[Array, Array]:
        """Rotate and scale queries (times the amplitude) and keys (divided by it).

        Parameters
        ----------
        q, k : array
            Queries and keys of one array-API library, real floating dtype; their head
            counts may differ (grouped-query attention).
        positions : None, int or array of int, optional
            ``None``: ``0 .. seq-1``; an int or a 0-d integer array: that offset plus
            ``0 .. seq-1`` (KV-cache decode); an integer array of one axis or more
            broadcastable to ``(*batch, seq)``.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            Where the batch, sequence and heads axes are; see :func:`anyrope.rotate`.
        inverse : bool, optional
            Undo this call: ``q`` rotated by the negative angle and divided by the
            amplitude, ``k`` rotated by the negative angle and multiplied by it (the
            tables ``cos / a`` and ``sin / a``, resp. ``a cos`` and ``a sin``, float64 on
            the host, rounded once).
        inplace : bool, optional
            Write the results into ``q`` and ``k`` (which must not share memory).
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``q`` and ``k`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        q2, k2 : arrays
            Like ``q`` and ``k``: same library, device, dtype and shape.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> xpos = anyrope.XPos(8, scale_base=16, center=4)
        >>> q = np.random.default_rng(0).standard_normal((2, 6, 3, 8))
        >>> k = np.random.default_rng(1).standard_normal((2, 6, 1, 8))
        >>> q2, k2 = xpos(q, k, positions=10)            # KV-cache offset
        >>> q3, k3 = xpos(q2, k2, positions=10, inverse=True)
        >>> bool(np.allclose(q3, q) and np.allclose(k3, k))
        True
        """
        q2, k2 = self._rotate(
            (q, k),
            ("q", "k"),
            positions=positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return q2, k2

    def rotate_queries(
        self,
        x: Array,
        positions: object = None,
        *,
        layout: str = "bshd",
        inverse: bool = False,
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> Array:
        """Rotate queries and multiply each pair by its amplitude.

        Parameters
        ----------
        x : array
            Queries of any array-API library, real floating dtype.
        positions : None, int or array of int, optional
            ``None``: ``0 .. seq-1``; an int or a 0-d integer array: that offset plus
            ``0 .. seq-1``; an integer array of one axis or more broadcastable to
            ``(*batch, seq)``.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            Where the batch, sequence and heads axes are; see :func:`anyrope.rotate`.
        inverse : bool, optional
            Undo this call: rotate by the negative angle and divide by the amplitude.
        inplace : bool, optional
            Write the result into ``x`` and return it.
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``x`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        array
            Same library, device, dtype and shape as ``x``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> x = np.zeros((3, 1, 2))                      # (seq, heads, head_dim)
        >>> x[..., 0] = 1.0
        >>> y = anyrope.XPos(2, scale_base=1).rotate_queries(x)
        >>> np.linalg.norm(y[:, 0], axis=-1)             # zeta_0 = 2/7 to the power m
        array([1.        , 0.28571429, 0.08163265])
        """
        (y,) = self._rotate(
            (x,),
            ("x",),
            positions=positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return y

    def rotate_keys(
        self,
        x: Array,
        positions: object = None,
        *,
        layout: str = "bshd",
        inverse: bool = False,
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> Array:
        """Rotate keys and divide each pair by its amplitude.

        Parameters
        ----------
        x : array
            Keys of any array-API library, real floating dtype.
        positions : None, int or array of int, optional
            ``None``: ``0 .. seq-1``; an int or a 0-d integer array: that offset plus
            ``0 .. seq-1``; an integer array of one axis or more broadcastable to
            ``(*batch, seq)``.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            Where the batch, sequence and heads axes are; see :func:`anyrope.rotate`.
        inverse : bool, optional
            Undo this call: rotate by the negative angle and multiply by the amplitude.
        inplace : bool, optional
            Write the result into ``x`` and return it.
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``x`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        array
            Same library, device, dtype and shape as ``x``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> x = np.zeros((3, 1, 2))                      # (seq, heads, head_dim)
        >>> x[..., 0] = 1.0
        >>> y = anyrope.XPos(2, scale_base=1).rotate_keys(x)
        >>> np.linalg.norm(y[:, 0], axis=-1)             # (7/2) to the power m
        array([ 1.  ,  3.5 , 12.25])
        """
        (y,) = self._rotate(
            (x,),
            ("x",),
            keys=True,
            positions=positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return y

    def _rotate(
        self,
        arrays: tuple[Array, ...],
        names: tuple[str, ...],
        *,
        positions: object,
        inverse: bool,
        keys: bool = False,
        **options: Any,
    ) -> tuple[Array, ...]:
        # The inverse of a scaled rotation a R(theta) is R(-theta) / a: the pipeline's
        # inverse (the negative angle) with the other side's tables, whose amplitude is 1 / a.
        scaled = (self._keys, self._queries) if keys else (self._queries, self._keys)
        if check_bool(inverse, "inverse"):
            scaled = scaled[::-1]
        sources = scaled[: len(arrays)]
        common = {
            "head_dim": self.head_dim,
            "interleaved": self.interleaved,
            "inverse": inverse,
            **options,
        }
        return _pipeline.rotate_each(sources, arrays, names, positions, **common)


def _restore(  # noqa: PLR0917 - the arguments __reduce__ gives, in order
    cls: type[XPos],
    head_dim: int,
    scale_base: int,
    center: int,
    rotary_dim: int,
    base: float,
    interleaved: bool,
) -> XPos:
    return cls(
        head_dim,
        scale_base=scale_base,
        center=center,
        rotary_dim=rotary_dim,
        base=base,
        interleaved=interleaved,
    )
