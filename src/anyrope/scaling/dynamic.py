"""Dynamic NTK scaling (emozilla): the NTK base grows with the current sequence length.

For a sequence of ``L > L_max`` positions,
``base' = base * (factor * L / L_max - (factor - 1)) ** (d / (d - 2))``; for
``L <= L_max`` the frequencies are the default ones. The frequencies depend on ``L``,
so tables are rebuilt whenever a call needs a longer sequence than the last one.
"""

from __future__ import annotations

from .._hostmath import power
from . import default
from ._types import FloatArray

__all__ = ["effective_length", "inv_freq", "scaled_base"]


def effective_length(seq_len: int | None, *, max_position_embeddings: int) -> int:
    """Return ``max(seq_len, L_max)``: every length up to ``L_max`` gives the same tables.

    Examples
    --------
    >>> from anyrope.scaling import dynamic
    >>> dynamic.effective_length(100, max_position_embeddings=4096)
    4096
    >>> dynamic.effective_length(5000, max_position_embeddings=4096)
    5000
    """
    if seq_len is None:
        return max_position_embeddings
    return max(seq_len, max_position_embeddings)


def scaled_base(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    seq_len: int | None,
    max_position_embeddings: int,
) -> float:
    """Return ``base * (factor * L / L_max - (factor - 1)) ** (d / (d - 2))``, L >= L_max.

    The exponent ``d / (d - 2)`` is an exact fraction.

    Examples
    --------
    >>> from anyrope.scaling import dynamic
    >>> dynamic.scaled_base(4, 100.0, factor=2.0, seq_len=10, max_position_embeddings=10)
    100.0
    >>> dynamic.scaled_base(4, 100.0, factor=2.0, seq_len=20, max_position_embeddings=10)
    900.0
    """
    length = effective_length(seq_len, max_position_embeddings=max_position_embeddings)
    stretch = factor * length / max_position_embeddings - (factor - 1.0)
    return float(base * power(stretch, rotary_dim, rotary_dim - 2))


def inv_freq(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    seq_len: int | None,
    max_position_embeddings: int,
) -> FloatArray:
    """Return the default frequencies for :func:`scaled_base`.

    Examples
    --------
    >>> from anyrope.scaling import dynamic
    >>> dynamic.inv_freq(4, 100.0, factor=2.0, seq_len=20, max_position_embeddings=10).tolist()
    [1.0, 0.03333333333333333]
    """
    scaled = scaled_base(
        rotary_dim,
        base,
        factor=factor,
        seq_len=seq_len,
        max_position_embeddings=max_position_embeddings,
    )
    return default.inv_freq(rotary_dim, scaled)
