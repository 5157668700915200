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

import math
from collections.abc import Sequence

import numpy as np

from .._hostmath import log
from . import default
from ._types import FloatArray

__all__ = ["attention_factor", "inv_freq", "select_factors", "uses_long_factors"]


def uses_long_factors(seq_len: int | None, *, original_max_position_embeddings: int) -> bool:
    """Whether a sequence of ``seq_len`` positions takes the long factors (``seq_len > L0``).

    ``None`` (no sequence yet) takes the short factors, like transformers at start-up.

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
