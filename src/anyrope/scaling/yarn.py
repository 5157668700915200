"""YaRN (Peng et al. 2023, arXiv 2309.00071): NTK-by-parts interpolation plus a temperature.

Pairs that turn many times over the original context ``L0`` (high frequency, wavelength
much shorter than ``L0``) keep their frequency; pairs that turn less than once over
``L0`` are interpolated like :mod:`anyrope.scaling.linear`; a linear ramp over the pair
index joins the two. The pair index where a pair makes ``r`` turns over ``L0`` is
``corr(r) = d * ln(L0 / (2 pi r)) / (2 ln base)``; the ramp runs from
``corr(beta_fast)`` to ``corr(beta_slow)``.

The attention factor ``mscale(s) = 0.1 * ln(s) + 1`` multiplies cos and sin (so the
attention logits by its square), compensating the entropy change of longer contexts.
DeepSeek-V2/V3 write it as a ratio ``mscale(s, mscale) / mscale(s, mscale_all_dim)``
and move ``mscale(s, mscale_all_dim) ** 2`` into the softmax scale instead
(:func:`softmax_scale`).

Which ``factor`` is used follows transformers 5.23.0: the ``factor`` of the scaling
dict, even when ``original_max_position_embeddings`` is given (transformers 4.4x and
4.5x replaced it by ``max_position_embeddings / original_max_position_embeddings``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._hostmath import log
from . import default
from ._checks import Factor, Positive
from ._types import FloatArray, Frequencies
from .config import RopeScaling, register

__all__ = [
    "YaRN",
    "attention_factor",
    "correction_dim",
    "correction_range",
    "inv_freq",
    "mscale",
    "ramp",
    "softmax_scale",
]


def mscale(scale: float, k: float = 1.0) -> float:
    """Return ``1`` if ``scale <= 1`` else ``0.1 * k * ln(scale) + 1``.

    Parameters
    ----------
    scale : float
        The context-extension factor ``s``.
    k : float, default 1.0
        The coefficient of the logarithm (DeepSeek's ``mscale`` or ``mscale_all_dim``).

    Returns
    -------
    float
        The temperature factor ``mscale(s, k)``.

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> yarn.mscale(1.0), round(yarn.mscale(40.0), 6)
    (1.0, 1.368888)
    """
    if scale <= 1.0:
        return 1.0
    return 0.1 * k * float(log(scale)) + 1.0


def correction_dim(
    num_rotations: float, rotary_dim: int, base: float, original_max_position_embeddings: int
) -> float:
    """Pair index (fractional) at which a pair turns ``num_rotations`` times over ``L0``.

    Parameters
    ----------
    num_rotations : float
        The number of turns ``r`` over the original context; greater than 0.
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.

    Returns
    -------
    float
        ``corr(r) = d * ln(L0 / (2 pi r)) / (2 ln base)``, not clamped to the pair range.

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> round(yarn.correction_dim(32, 128, 10000.0, 4096), 4)
    20.9445
    """
    turns = original_max_position_embeddings / (num_rotations * 2.0 * math.pi)
    return rotary_dim * float(log(turns)) / (2.0 * float(log(base)))


def correction_range(
    rotary_dim: int,
    base: float,
    *,
    beta_fast: float,
    beta_slow: float,
    original_max_position_embeddings: int,
    truncate: bool,
) -> tuple[float, float]:
    """Return ``(low, high)``: the ramp's ends, floored/ceiled when ``truncate``, clamped.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    beta_fast : float
        Turns over ``L0`` at the ramp's low end: pairs that turn more often keep their
        frequency.
    beta_slow : float
        Turns over ``L0`` at the ramp's high end: pairs that turn less often are
        interpolated; greater than 0 and at most ``beta_fast``.
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.
    truncate : bool
        Whether the ramp's ends are rounded outward to whole pair indices, as
        transformers does unless the config sets ``truncate`` to false.

    Returns
    -------
    low : float
        ``corr(beta_fast)``, at least 0 (an int when ``truncate``).
    high : float
        ``corr(beta_slow)``, at most ``rotary_dim - 1`` (an int when ``truncate``).

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> yarn.correction_range(
    ...     128, 10000.0, beta_fast=32, beta_slow=1,
    ...     original_max_position_embeddings=4096, truncate=True)
    (20, 46)
    """
    low = correction_dim(beta_fast, rotary_dim, base, original_max_position_embeddings)
    high = correction_dim(beta_slow, rotary_dim, base, original_max_position_embeddings)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def ramp(low: float, high: float, num_pairs: int) -> FloatArray:
    """Return ``clip((i - low) / (high - low), 0, 1)`` for ``i = 0 .. num_pairs - 1``.

    ``high`` is nudged by 0.001 when it equals ``low`` so the ramp stays defined.

    Parameters
    ----------
    low : float
        The pair index where the ramp leaves 0.
    high : float
        The pair index where the ramp reaches 1.
    num_pairs : int
        The number of pairs, ``rotary_dim // 2``.

    Returns
    -------
    numpy.ndarray
        The float64 ramp, values in ``[0, 1]``, shape ``(num_pairs,)``.

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> yarn.ramp(1, 3, 5).tolist()
    [0.0, 0.0, 0.5, 1.0, 1.0]
    """
    if low == high:
        high += 0.001
    index = np.arange(num_pairs, dtype=np.float64)
    result: FloatArray = np.clip((index - low) / (high - low), 0.0, 1.0)
    return result


def inv_freq(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> FloatArray:
    """Return ``interp * (1 - extrapolate) + extra * extrapolate`` with ``extrapolate = 1 - ramp``.

    ``extra`` are the default frequencies and ``interp = extra / factor``.

    Parameters
    ----------
    rotary_dim : int
        The rotated width ``d``: positive and even.
    base : float
        The unscaled RoPE base (``rope_theta``): finite and > 1.
    factor : float
        The extension factor ``s`` (>= 1) that divides the interpolated frequencies.
    original_max_position_embeddings : int
        ``L0``, the context length before the extension.
    beta_fast : float, default 32.0
        Turns over ``L0`` at the ramp's low end: pairs that turn more often keep their
        frequency.
    beta_slow : float, default 1.0
        Turns over ``L0`` at the ramp's high end: pairs that turn less often are
        interpolated; greater than 0 and at most ``beta_fast``.
    truncate : bool, default True
        Whether the ramp's ends are rounded outward to whole pair indices, as
        transformers does unless the config sets ``truncate`` to false.

    Returns
    -------
    numpy.ndarray
        The float64 inverse frequencies, shape ``(rotary_dim // 2,)``.

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> freq = yarn.inv_freq(128, 10000.0, factor=4.0, original_max_position_embeddings=4096)
    >>> unscaled = yarn.default.inv_freq(128, 10000.0)
    >>> bool(freq[0] == unscaled[0]), bool(freq[-1] == unscaled[-1] / 4.0)
    (True, True)
    """
    extrapolated = default.inv_freq(rotary_dim, base)
    interpolated = extrapolated / factor
    low, high = correction_range(
        rotary_dim,
        base,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        original_max_position_embeddings=original_max_position_embeddings,
        truncate=truncate,
    )
    extrapolate = 1.0 - ramp(low, high, rotary_dim // 2)
    result: FloatArray = interpolated * (1.0 - extrapolate) + extrapolated * extrapolate
    return result


def attention_factor(
    factor: float,
    *,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
) -> float:
    """Return the given ``attention_factor``, else the DeepSeek ratio, else ``mscale(factor)``.

    The ratio ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` applies when
    both are given and non-zero (DeepSeek-V2/V3 set both to 1, which gives 1.0).

    Parameters
    ----------
    factor : float
        The extension factor ``s``.
    attention_factor : float, optional
        An attention factor given by the config; when not ``None`` it is returned as is.
    mscale : float, optional
        DeepSeek's coefficient ``k`` of the numerator ``mscale(factor, mscale)``.
    mscale_all_dim : float, optional
        DeepSeek's coefficient ``k`` of the denominator ``mscale(factor, mscale_all_dim)``.

    Returns
    -------
    float
        The factor that multiplies cos and sin.

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> yarn.attention_factor(40.0, mscale=1.0, mscale_all_dim=1.0)
    1.0
    >>> round(yarn.attention_factor(4.0), 6)
    1.138629
    >>> yarn.attention_factor(4.0, attention_factor=1.0)
    1.0
    """
    if attention_factor is not None:
        return float(attention_factor)
    if mscale and mscale_all_dim:
        return _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
    return _mscale(factor)


def softmax_scale(factor: float, *, mscale_all_dim: float | None) -> float:
    """Return DeepSeek's softmax-scale multiplier ``mscale(factor, mscale_all_dim) ** 2``.

    Attention code multiplies its usual ``1 / sqrt(head_dim)`` by this; 1.0 when
    ``mscale_all_dim`` is absent or zero.

    Parameters
    ----------
    factor : float
        The extension factor ``s``.
    mscale_all_dim : float or None
        DeepSeek's coefficient ``k`` of ``mscale(factor, k)``; ``None`` or 0 for none.

    Returns
    -------
    float
        The multiplier of the softmax scale.

    Examples
    --------
    >>> from anyrope.scaling import yarn
    >>> round(yarn.softmax_scale(40.0, mscale_all_dim=1.0), 6)
    1.873854
    >>> yarn.softmax_scale(40.0, mscale_all_dim=None)
    1.0
    """
    scale = _mscale(factor, mscale_all_dim) if mscale_all_dim else 1.0
    return scale * scale


# `attention_factor` takes a parameter named `mscale`, which hides the function.
_mscale = mscale


@register
@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class YaRN(RopeScaling):
    """``rope_type="yarn"``: NTK-by-parts interpolation and a temperature."""

    rope_type = "yarn"
    factor: Factor
    original_max_position_embeddings: int | None = None
    attention_factor: Positive | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def _validate(self) -> None:
        if self.beta_slow <= 0.0 or self.beta_fast < self.beta_slow:
            raise ValueError(
                "`beta_fast` must be >= `beta_slow` > 0; got "
                f"beta_fast={self.beta_fast!r}, beta_slow={self.beta_slow!r}"
            )

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        ramp = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate")
        temperature = self._keys("attention_factor", "mscale", "mscale_all_dim")
        freq = inv_freq(rotary_dim, base, **self._keys(*ramp))
        return freq, attention_factor(self.factor, **temperature)

    @property
    def softmax_scale(self) -> float:
        """Multiplier of the attention softmax scale (DeepSeek's, :func:`softmax_scale`).

        Returns
        -------
        float
            ``mscale(factor, mscale_all_dim) ** 2``; 1.0 without ``mscale_all_dim``.
        """
        return softmax_scale(self.factor, mscale_all_dim=self.mscale_all_dim)
