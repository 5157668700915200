"""2D axial RoPE for image patches (EVA-02, Qwen2-VL's vision tower, FLUX-style tokens).

Positions are ``(row, column)``. The first half of the ``d/2`` pairs follows the row and
the second half the column; each half has the frequencies of a ``d/2``-wide RoPE,
``base ** (-2j / (d/2))`` for ``j = 0 .. d/4 - 1``. The score between two patches then
depends only on their 2D offset. transformers calls this ``rope_type="axial"``.
"""

from __future__ import annotations

import numpy as np

from . import default
from ._registry import Method, ScalingFields, register
from ._types import FloatArray

__all__ = ["ATTENTION_FACTOR", "inv_freq", "sections"]

ATTENTION_FACTOR = 1.0


def sections(rotary_dim: int) -> tuple[int, int]:
    """Return the pairs per axis, ``(row, column)``.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``, a multiple of 4 for axial RoPE (checked by
        :func:`inv_freq`, not here).

    Returns
    -------
    tuple of int
        ``(d // 4, d // 4)``: the pairs that follow the row, then those that follow the
        column.

    Examples
    --------
    >>> from anyrope.scaling import axial
    >>> axial.sections(64)
    (16, 16)
    """
    return (rotary_dim // 4, rotary_dim // 4)


def inv_freq(rotary_dim: int, base: float) -> FloatArray:
    """Return the frequencies of a ``rotary_dim / 2`` RoPE, once for each axis.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and a multiple of 4.
    base : float
        The base of each axis's frequencies ``base ** (-2j / (d/2))``: finite and > 1.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(d // 2,)``: the ``d/4`` row frequencies,
        then the same ``d/4`` values for the column.

    Raises
    ------
    ValueError
        If ``rotary_dim`` is not a multiple of 4.

    Examples
    --------
    >>> from anyrope.scaling import axial
    >>> axial.inv_freq(8, 10000.0).tolist()
    [1.0, 0.01, 1.0, 0.01]
    """
    if rotary_dim % 4:
        raise ValueError(
            "2D axial RoPE splits the pairs between two axes: `rotary_dim` must be a "
            f"multiple of 4; got {rotary_dim}"
        )
    half = default.inv_freq(rotary_dim // 2, base)
    result: FloatArray = np.concatenate([half, half])
    return result


def _check_rotary_dim(scaling: ScalingFields, rotary_dim: int) -> None:
    # RoPE calls this when it is built, so a bad width fails before any table, naming the
    # config's rope_type.
    if rotary_dim % 4:
        raise ValueError(
            "rope_type='axial' splits the pairs between two axes: `rotary_dim` must be a "
            f"multiple of 4; got {rotary_dim}"
        )


def _frequencies(
    scaling: ScalingFields, rotary_dim: int, base: float, seq_len: int | None
) -> tuple[FloatArray, float]:
    return inv_freq(rotary_dim, base), ATTENTION_FACTOR


register(Method("axial", _frequencies, check_rotary_dim=_check_rotary_dim, sections=sections))
