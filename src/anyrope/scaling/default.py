"""Unscaled RoPE: ``inv_freq_i = base ** (-2i/d)`` and attention factor 1 (RoFormer).

:func:`inv_freq` (the unscaled inverse frequencies, float64 of shape ``(rotary_dim // 2,)``)
is the one every method starts from.
"""

from __future__ import annotations

from .._frequencies import default_inv_freq as inv_freq
from ._types import Frequencies
from .config import RopeScaling, register

__all__ = ["ATTENTION_FACTOR", "Default", "inv_freq"]

ATTENTION_FACTOR = 1.0


@register
class Default(RopeScaling):
    """``rope_type="default"``: no scaling."""

    rope_type = "default"

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        return inv_freq(rotary_dim, base), ATTENTION_FACTOR
