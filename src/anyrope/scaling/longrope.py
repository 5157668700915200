"""LongRoPE (Ding et al. 2024, arXiv 2402.13753), used by Phi-3 and Phi-3.5.

Each pair has its own searched rescale factor ``r_i``: ``inv_freq_i = 1 / (r_i * base**(2i/d))``.
A model ships two lists: ``short_factor`` for sequences up to the original context
``L0`` and ``long_factor`` beyond it. The list is chosen by the length of the sequence
actually being processed (``max position + 1``), as transformers does; a runtime that
picks by the configured maximum instead uses the long factors for short prompts too.

The attention factor depends only on the configured extension ``factor = L_max / L0``
(or the given ``factor``): ``sqrt(1 + ln(factor) / ln(L0))``, or 1 when ``factor <= 1``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .._hostmath import log
from . import default
from ._checks import Factor, Positive
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["LongRoPE", "attention_factor", "inv_freq", "select_factors", "uses_long_factors"]


def uses_long_factors(seq_len: int | None, *, original_max_position_embeddings: int) -> bool:
    """Whether a sequence of ``seq_len`` positions takes the long factors (``seq_len > L0``).

    ``None`` (no sequence yet) takes the short factors, like transformers at start-up.

    Parameters
    ----------
    seq_len : int or None
        The length of the sequence being processed (``max position + 1``); ``None``
        before any sequence is seen.
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.

    Returns
    -------
    bool
        True when ``seq_len > L0``.

    Examples
    --------
    >>> from anyrope.scaling import longrope
    >>> longrope.uses_long_factors(4096, original_max_position_embeddings=4096)
    False
    >>> longrope.uses_long_factors(4097, original_max_position_embeddings=4096)
    True
    """
    return seq_len is not None and seq_len > original_max_position_embeddings


def select_factors(
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    *,
    seq_len: int | None,
    original_max_position_embeddings: int,
) -> FloatArray:
    """Return the factor list for ``seq_len`` as a float64 array.

    Parameters
    ----------
    short_factor : sequence of float
        The per-pair rescale factors ``r_i`` for sequences up to ``L0``.
    long_factor : sequence of float
        The per-pair rescale factors ``r_i`` for sequences longer than ``L0``.
    seq_len : int or None
        The length of the sequence being processed (``max position + 1``); ``None``
        before any sequence is seen.
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.

    Returns
    -------
    numpy.ndarray
        ``long_factor`` when :func:`uses_long_factors` says so, else ``short_factor``,
        as float64.

    Examples
    --------
    >>> from anyrope.scaling import longrope
    >>> longrope.select_factors([1.0], [4.0], seq_len=10, original_max_position_embeddings=8)
    array([4.])
    """
    long = uses_long_factors(
        seq_len, original_max_position_embeddings=original_max_position_embeddings
    )
    return np.asarray(long_factor if long else short_factor, dtype=np.float64)


def inv_freq(rotary_dim: int, base: float, *, factors: Sequence[float] | FloatArray) -> FloatArray:
    """Return ``1 / (r_i * base ** (2i/d))``, i.e. the default frequencies divided by ``r``.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factors : sequence of float or numpy.ndarray
        The rescale factors ``r_i``, one per pair (``rotary_dim // 2``), as
        :func:`select_factors` returns them.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(rotary_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import longrope
    >>> longrope.inv_freq(4, 10000.0, factors=[2.0, 4.0]).tolist()
    [0.5, 0.0025]
    """
    rescale = np.asarray(factors, dtype=np.float64)
    result: FloatArray = default.inv_freq(rotary_dim, base) / rescale
    return result


def attention_factor(
    *,
    factor: float,
    original_max_position_embeddings: int,
    attention_factor: float | None = None,
) -> float:
    """Return the given ``attention_factor``, else ``sqrt(1 + ln(factor) / ln(L0))``.

    The default is 1 when ``factor <= 1`` (no extension).

    Parameters
    ----------
    factor : float
        The configured extension ``L_max / L0`` (or the scaling dict's ``factor``).
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.
    attention_factor : float, optional
        An attention factor given by the config; when not ``None`` it is returned as is.

    Returns
    -------
    float
        The factor that multiplies cos and sin.

    Examples
    --------
    >>> from anyrope.scaling import longrope
    >>> round(longrope.attention_factor(factor=32.0, original_max_position_embeddings=4096), 6)
    1.190238
    """
    if attention_factor is not None:
        return float(attention_factor)
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1.0 + float(log(factor)) / float(log(original_max_position_embeddings)))


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class LongRoPE(RopeScaling):
    """``rope_type="longrope"``: searched per-pair factors, short and long."""

    rope_type = "longrope"
    depends_on_length = True
    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    factor: Factor | None = None
    attention_factor: Positive | None = None
    original_max_position_embeddings: int | None = None

    def _validate(self) -> None:
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"`short_factor` and `long_factor` must have the same length; got "
                f"{len(self.short_factor)} and {len(self.long_factor)}"
            )
        # Each is positive when given: none of them is set when all are false.
        if not any(self._keys("attention_factor", "factor", "max_position_embeddings").values()):
            raise ValueError(
                "rope_type='longrope' needs `factor`, `attention_factor` or "
                "`max_position_embeddings` to set its attention factor"
            )

    def _check_rotary_dim(self, rotary_dim: int) -> None:
        if len(self.short_factor) != rotary_dim // 2:
            raise ValueError(
                f"`short_factor` must have rotary_dim // 2 = {rotary_dim // 2} entries; got "
                f"{len(self.short_factor)}"
            )

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        original = self.original_max_position_embeddings
        assert original is not None
        lists = self._keys("short_factor", "long_factor", "original_max_position_embeddings")
        factors = select_factors(seq_len=seq_len, **lists)
        # Without `factor`, the extension is L_max / L0 (or none, when `attention_factor` is given).
        extension = self.factor or (self.max_position_embeddings or original) / original
        temperature = self._keys("original_max_position_embeddings", "attention_factor")
        factor = attention_factor(factor=extension, **temperature)
        return inv_freq(rotary_dim, base, factors=factors), factor

    def length_bucket(self, seq_len: int | None) -> int:
        """0 up to ``original_max_position_embeddings`` (short factors), else 1 (long).

        Parameters
        ----------
        seq_len : int or None
            The length of the sequence (``max position + 1``); ``None`` before any
            sequence is seen.

        Returns
        -------
        int
            Whether the sequence takes the long factors.
        """
        return int(uses_long_factors(seq_len, **self._keys("original_max_position_embeddings")))
