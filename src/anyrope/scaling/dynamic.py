"""Dynamic NTK scaling (emozilla): the NTK base grows with the current sequence length.

For a sequence of ``L > L_max`` positions,
``base' = base * (factor * L / L_max - (factor - 1)) ** (d / (d - 2))``; for
``L <= L_max`` the frequencies are the default ones. The frequencies depend on ``L``,
so tables are rebuilt whenever a call needs a longer sequence than the last one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._hostmath import power
from . import ntk
from ._types import FloatArray, Frequencies, IntArray
from .config import register
from .ntk import NTK

__all__ = ["DynamicNTK", "effective_length", "inv_freq", "inv_freq_per_length", "scaled_base"]


def effective_length(seq_len: int | None, *, max_position_embeddings: int) -> int:
    """Return ``max(seq_len, L_max)``: every length up to ``L_max`` gives the same tables.

    Parameters
    ----------
    seq_len : int or None
        The length of the current sequence (``max position + 1``); ``None`` (no sequence
        yet) counts as ``L_max``.
    max_position_embeddings : int
        ``L_max``, the model's configured context length.

    Returns
    -------
    int
        The length the scaled base is computed for, at least ``L_max``.

    Examples
    --------
    >>> from anyrope.scaling import dynamic
    >>> dynamic.effective_length(100, max_position_embeddings=4096)
    4096
    >>> dynamic.effective_length(5000, max_position_embeddings=4096)
    5000
    """
    return max(seq_len or 0, max_position_embeddings)


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

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: even and greater than 2.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The scaling dict's ``factor`` (>= 1).
    seq_len : int or None
        The length ``L`` of the current sequence (``max position + 1``); ``None`` (no
        sequence yet) counts as ``L_max``.
    max_position_embeddings : int
        ``L_max``, the model's configured context length.

    Returns
    -------
    float
        The raised base; ``base`` itself when ``seq_len <= L_max``.

    Examples
    --------
    >>> from anyrope.scaling import dynamic
    >>> dynamic.scaled_base(4, 100.0, factor=2.0, seq_len=10, max_position_embeddings=10)
    100.0
    >>> dynamic.scaled_base(4, 100.0, factor=2.0, seq_len=20, max_position_embeddings=10)
    900.0
    """
    return ntk.scaled_base(
        rotary_dim, base, factor=_stretch(factor, seq_len, max_position_embeddings)
    )


def inv_freq(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    seq_len: int | None,
    max_position_embeddings: int,
) -> FloatArray:
    """Return the default frequencies for :func:`scaled_base`.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: even and greater than 2.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The scaling dict's ``factor`` (>= 1).
    seq_len : int or None
        The length ``L`` of the current sequence (``max position + 1``); ``None`` (no
        sequence yet) counts as ``L_max``.
    max_position_embeddings : int
        ``L_max``, the model's configured context length.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(rotary_dim // 2,)``; the default ones
        when ``seq_len <= L_max``.

    Examples
    --------
    >>> from anyrope.scaling import dynamic
    >>> dynamic.inv_freq(4, 100.0, factor=2.0, seq_len=20, max_position_embeddings=10).tolist()
    [1.0, 0.03333333333333333]
    """
    return ntk.inv_freq(rotary_dim, base, factor=_stretch(factor, seq_len, max_position_embeddings))


def _stretch(factor: float, seq_len: int | None, max_position_embeddings: int) -> float:
    """The factor of static NTK that gives dynamic NTK's base for a sequence of ``seq_len``:
    ``factor * L / L_max - (factor - 1)``, with ``L`` at least ``L_max``."""
    length = effective_length(seq_len, max_position_embeddings=max_position_embeddings)
    return factor * length / max_position_embeddings - (factor - 1.0)


def inv_freq_per_length(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    lengths: IntArray,
    max_position_embeddings: int,
) -> FloatArray:
    """Return :func:`inv_freq` for each of ``lengths`` at once, bit for bit.

    The same float64 operations, element by element: one call for many lengths costs
    about what one length costs, which is what decoding past the trained context needs
    (every new token is a new length).

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive, even and greater than 2.
    base : float
        The unscaled base (``rope_theta``): finite and > 1.
    factor : float
        The scaling factor, >= 1.
    lengths : numpy.ndarray
        Sequence lengths (``max position + 1``), non-negative integers below ``2**53``.
    max_position_embeddings : int
        The trained context ``L_max``.

    Returns
    -------
    numpy.ndarray
        The float64 frequencies, shape ``(len(lengths), rotary_dim // 2)``.

    Examples
    --------
    >>> import numpy as np
    >>> from anyrope.scaling import dynamic
    >>> many = dynamic.inv_freq_per_length(
    ...     4, 100.0, factor=2.0, lengths=np.array([10, 20]), max_position_embeddings=10)
    >>> many.tolist()
    [[1.0, 0.1], [1.0, 0.03333333333333333]]
    """
    length = np.maximum(np.asarray(lengths, dtype=np.int64), max_position_embeddings)
    stretch = factor * length.astype(np.float64) / max_position_embeddings - (factor - 1.0)
    scaled = base * power(stretch, rotary_dim, rotary_dim - 2)
    return power(scaled[:, None], -np.arange(0, rotary_dim, 2), rotary_dim)


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class DynamicNTK(NTK):
    """``rope_type="dynamic"``: NTK whose base grows with the length past ``L_max``."""

    rope_type = "dynamic"
    depends_on_length = True
    frequencies_change_with_every_length = True
    # Required here: a bare annotation would inherit the base record's default, None.
    max_position_embeddings: int = dataclasses.field()

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        keys = self._keys("factor", "max_position_embeddings")
        return inv_freq(rotary_dim, base, seq_len=seq_len, **keys), 1.0

    def _frequencies_per_length(
        self, rotary_dim: int, base: float, lengths: IntArray
    ) -> Frequencies:
        keys = self._keys("factor", "max_position_embeddings")
        return inv_freq_per_length(rotary_dim, base, lengths=lengths, **keys), 1.0

    def length_bucket(self, seq_len: int | None) -> int:
        """``max(seq_len, max_position_embeddings)``: each length past ``L_max`` its own.

        Parameters
        ----------
        seq_len : int or None
            The length of the sequence (``max position + 1``); ``None`` counts as
            ``max_position_embeddings``.

        Returns
        -------
        int
            The length the frequencies are computed for (:func:`effective_length`).
        """
        return effective_length(seq_len, max_position_embeddings=self.max_position_embeddings)
