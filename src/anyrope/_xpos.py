"""The :class:`XPos` object: RoPE whose queries and keys carry a decaying amplitude."""

from __future__ import annotations

from typing import Any

from ._amplitude import Amplitude, xpos_zeta
from ._call import make_call, shared_docs
from ._namespace import Array, Namespace
from ._rope import KEYS, QUERIES, RoPE
from ._validation import MAX_POSITION, check_int

#: ``scale_base`` stays below this: the exponent's denominator of the host power.
MAX_SCALE_BASE = 2**40


@shared_docs
class XPos(RoPE):
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
    {shared}

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

    Notes
    -----
    An :class:`XPos` is a :class:`RoPE` with amplitudes: it takes every option of a
    RoPE call and every backend, torch.compile and dask included. ``xpos(q, k)`` and
    :meth:`RoPE.rotate_qkv` scale queries and keys each their way; one array is rotated
    by :meth:`rotate_queries` or :meth:`rotate_keys` (:meth:`RoPE.rotate` does not
    know which it is, and refuses). :meth:`RoPE.tables` gives those of the queries.

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
        start_index: int = 0,
        max_positions: int | None = None,
    ) -> None:
        bounds = "a positive integer below 2**40"
        self.scale_base = check_int(scale_base, "scale_base", 1, MAX_SCALE_BASE, bounds)
        bounds = "a non-negative integer below 2**53"
        self.center = check_int(center, "center", 0, MAX_POSITION, bounds)
        super().__init__(
            head_dim,
            rotary_dim=rotary_dim,
            base=base,
            interleaved=interleaved,
            start_index=start_index,
            max_positions=max_positions,
        )
        self.zeta = xpos_zeta(self.rotary_dim)

    def _amplitudes(self) -> tuple[Amplitude | None, ...]:
        """Queries are multiplied by the amplitude, keys divided by it."""
        return tuple(
            Amplitude(self.rotary_dim, self.scale_base, self.center, sign) for sign in (1, -1)
        )

    _KEYWORDS = ("scale_base", "center", *RoPE._KEYWORDS[:-1])  # no scaling

    def rotate(self, x: Array, positions: object = None, **options: Any) -> Array:
        """Refused: queries and keys are scaled apart; see :meth:`rotate_queries`.

        Parameters
        ----------
        x : array
            An array of queries or keys.
        positions : object
            Its positions.
        **options
            The options of :meth:`RoPE.rotate`.

        Returns
        -------
        array
            Never: raises ``TypeError``.

        Raises
        ------
        TypeError
            Always: call :meth:`rotate_queries` or :meth:`rotate_keys`.
        """
        raise TypeError(
            "XPos scales queries and keys apart: call rotate_queries or rotate_keys "
            "(or xpos(q, k)), not rotate"
        )

    @shared_docs
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
        inverse : bool, optional
            Undo this call: rotate by the negative angle and divide by the amplitude.
        {shared}

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
        call = make_call((x,), ("x",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
        (y,) = self._rotate(call, QUERIES)
        return y

    @shared_docs
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
        inverse : bool, optional
            Undo this call: rotate by the negative angle and multiply by the amplitude.
        {shared}

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
        call = make_call((x,), ("x",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
        (y,) = self._rotate(call, KEYS)
        return y
