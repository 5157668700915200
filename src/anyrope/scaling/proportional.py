"""Proportional RoPE (Gemma 4's full-attention layers): a share of the pairs rotates.

The whole head is paired half-split, as in ordinary RoPE over ``head_dim``; the first
``int(partial_rotary_factor * head_dim // 2)`` pairs keep the frequencies they would
have in a full-width RoPE, ``base ** (-2i / head_dim)``, and the other pairs get
frequency 0 (they stay in place). Every frequency is divided by ``factor`` (1 by
default). Unlike ``partial_rotary_factor`` elsewhere, the fraction does not narrow the
rotated width: it chooses how many of the head's pairs turn.
"""

from __future__ import annotations

import dataclasses

from . import linear
from ._checks import Factor
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = ["Proportional", "inv_freq"]


def inv_freq(head_dim: int, base: float, *, fraction: float, factor: float = 1.0) -> FloatArray:
    """Return the frequencies of a full-width RoPE, zero past the rotating share.

    Parameters
    ----------
    head_dim : int
        The width of the head, all of it paired: positive and even.
    base : float
        The RoPE base (``rope_theta``): finite and > 1.
    fraction : float
        ``partial_rotary_factor`` in (0, 1]: ``int(fraction * head_dim // 2)`` pairs rotate.
    factor : float, optional
        Divides every frequency (>= 1); default 1.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(head_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import proportional
    >>> proportional.inv_freq(8, 10000.0, fraction=0.5).tolist()
    [1.0, 0.1, 0.0, 0.0]
    """
    result = linear.inv_freq(head_dim, base, factor=factor)
    result[int(fraction * head_dim // 2) :] = 0.0
    return result


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class Proportional(RopeScaling):
    """``rope_type="proportional"``: ``partial_rotary_factor`` of the head's pairs turn."""

    rope_type = "proportional"
    partial_rotary_factor_sets_width = False
    factor: Factor | None = None

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        # Both are positive when given: absent, the whole head turns, unscaled.
        fraction = self.partial_rotary_factor or 1.0
        return inv_freq(rotary_dim, base, fraction=fraction, factor=self.factor or 1.0), 1.0
