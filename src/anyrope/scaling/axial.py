"""Axial RoPE: positions on a grid of ``n`` axes (image patches, video frames).

Positions are ``(coordinate_0, ..., coordinate_{n-1})``. The ``d/2`` pairs are cut into
``n`` contiguous sections, one per axis in axis order; a section of ``p`` pairs has the
frequencies of a ``2p``-wide RoPE, ``base ** (-2j / (2p))`` for ``j = 0 .. p - 1``, and
takes its angles from its own coordinate. The score between two tokens then depends
only on their ``n``-dimensional offset.

Without ``axial_sections`` the grid is 2D with equal halves, ``(row, column)``: EVA-02,
Qwen2-VL's vision tower, FLUX-style tokens; transformers calls this
``rope_type="axial"``. ``axial_sections`` gives the pairs per axis of any other grid,
e.g. ``[t, h, w]`` for video: Wan 2.1 splits a head of ``d`` features into
``d - 4 (d // 6)`` for time and ``2 (d // 6)`` each for height and width, and
rotary-embedding-torch's ``get_axial_freqs`` gives each of ``n`` axes the frequencies of
a ``D``-wide RoPE (``axial_sections=[D // 2] * n``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from . import default
from ._checks import check_sum
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["ATTENTION_FACTOR", "Axial", "inv_freq", "sections"]

ATTENTION_FACTOR = 1.0


def sections(rotary_dim: int, *, axial_sections: Sequence[int] | None = None) -> tuple[int, ...]:
    """Return the pairs per axis.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: a multiple of 4 without ``axial_sections``.
    axial_sections : sequence of int, optional
        The pairs of each axis, in axis order, summing to ``d // 2``; default ``None``, two
        equal halves.

    Returns
    -------
    tuple of int
        ``axial_sections`` as given, or ``(d // 4, d // 4)``: the pairs that follow the
        row, then those that follow the column.

    Raises
    ------
    ValueError
        If ``rotary_dim`` is not a multiple of 4 (two equal halves), or if
        ``axial_sections`` does not sum to ``rotary_dim // 2``.

    Examples
    --------
    >>> from anyrope.scaling import axial
    >>> axial.sections(64)
    (16, 16)
    >>> axial.sections(64, axial_sections=[12, 10, 10])
    (12, 10, 10)
    """
    if axial_sections is None:
        if rotary_dim % 4:
            raise ValueError(
                "axial RoPE without `axial_sections` splits the pairs between two axes: "
                f"`rotary_dim` must be a multiple of 4; got {rotary_dim}"
            )
        return (rotary_dim // 4, rotary_dim // 4)
    check_sum("axial_sections", axial_sections, rotary_dim)
    return tuple(int(pairs) for pairs in axial_sections)


def inv_freq(
    rotary_dim: int, base: float, *, axial_sections: Sequence[int] | None = None
) -> FloatArray:
    """Return each axis's frequencies, those of a RoPE as wide as its section, in axis order.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive, and a multiple of 4 without ``axial_sections``.
    base : float
        The base of each axis's frequencies ``base ** (-2j / (2p))`` for an axis of ``p``
        pairs: finite and > 1.
    axial_sections : sequence of int, optional
        The pairs of each axis, summing to ``d // 2``; default ``None``, two equal halves.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(d // 2,)``: the ``p_0`` of the first
        axis, then the ``p_1`` of the second, and so on.

    Raises
    ------
    ValueError
        If ``rotary_dim`` is not a multiple of 4 (two equal halves), or if
        ``axial_sections`` does not sum to ``rotary_dim // 2``.

    Examples
    --------
    >>> from anyrope.scaling import axial
    >>> axial.inv_freq(8, 10000.0).tolist()
    [1.0, 0.01, 1.0, 0.01]
    >>> axial.inv_freq(8, 10000.0, axial_sections=[2, 1, 1]).tolist()
    [1.0, 0.01, 1.0, 1.0]
    """
    pairs = sections(rotary_dim, axial_sections=axial_sections)
    result: FloatArray = np.concatenate([default.inv_freq(2 * p, base) for p in pairs])
    return result


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class Axial(RopeScaling):
    """``rope_type="axial"``: grid positions, one section of pairs per axis."""

    rope_type = "axial"
    axial_sections: tuple[int, ...] | None = None

    def _validate(self) -> None:
        if self.mrope_section is not None:
            raise ValueError(f"`mrope_section` does not apply to rope_type={self.rope_type!r}")

    def sections(self, rotary_dim: int) -> tuple[int, ...]:
        """The pairs per axis: ``axial_sections``, or two equal halves (:func:`sections`).

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d``.

        Returns
        -------
        tuple of int
            The pairs of each axis, in axis order.
        """
        return sections(rotary_dim, axial_sections=self.axial_sections)

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        return inv_freq(rotary_dim, base, axial_sections=self.axial_sections), ATTENTION_FACTOR
