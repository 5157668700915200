"""Read the RoPE settings of a Hugging Face model config (``config.json``).

:func:`from_hf_config` takes the parsed ``config.json`` dict, or any object with the
same attributes (a transformers ``PretrainedConfig`` works; anyrope never imports
transformers). Keys read:

- ``rope_theta`` (or GPT-NeoX's ``rotary_emb_base``, or ``rope_theta`` inside
  ``rope_parameters``); 10000 when absent, as in transformers;
- ``head_dim``, else ``hidden_size // num_attention_heads`` (``embed_dim //
  num_attention_heads`` for the ``axial`` RoPE of a vision tower, as transformers
  does); DeepSeek's ``qk_rope_head_dim`` is the width of the separate rotated part, so
  it is both the head and the rotary width;
- ``partial_rotary_factor`` or GPT-NeoX's ``rotary_pct`` (rotary width
  ``int(head_dim * fraction)``);
- ``max_position_embeddings``, ``original_max_position_embeddings``;
- ``rope_parameters`` or ``rope_scaling`` (see :func:`~anyrope.scaling.parse_rope_scaling`);
- ``rope_interleave`` (DeepSeek); DeepSeek-V2/V3 configs without it are interleaved,
  the default of their transformers config class.

Two sources of one value that disagree are an error naming both keys.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .._validation import check_base
from .config import RopeScaling, parse_rope_scaling

__all__ = ["HFRopeConfig", "from_hf_config"]

_MISSING = object()
_INTERLEAVED_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3"})


@dataclasses.dataclass(frozen=True)
class HFRopeConfig:
    """RoPE settings read from a model config; :meth:`kwargs` feeds :class:`anyrope.RoPE`."""

    head_dim: int
    rotary_dim: int
    base: float
    interleaved: bool
    max_position_embeddings: int | None
    scaling: RopeScaling

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``anyrope.RoPE(head_dim, **kwargs)``.

        Returns
        -------
        dict
            ``rotary_dim``, ``base``, ``interleaved``, ``scaling`` and
            ``max_position_embeddings``, keyed by argument name.
        """
        return {
            "rotary_dim": self.rotary_dim,
            "base": self.base,
            "interleaved": self.interleaved,
            "scaling": self.scaling,
            "max_position_embeddings": self.max_position_embeddings,
        }


def _get(config: Any, key: str) -> Any:
    if isinstance(config, Mapping):
        value = config.get(key, _MISSING)
    else:
        value = getattr(config, key, _MISSING)
    return _MISSING if value is None else value


def _one_of(config: Any, keys: tuple[str, ...]) -> tuple[str, Any]:
    """The value of the first present key; an error if another present key disagrees."""
    found = [(key, _get(config, key)) for key in keys]
    present = [(key, value) for key, value in found if value is not _MISSING]
    if not present:
        return keys[0], _MISSING
    for key, value in present[1:]:
        if value != present[0][1]:
            raise ValueError(
                f"`{present[0][0]}`={present[0][1]!r} and `{key}`={value!r} "
                "disagree in the model config"
            )
    return present[0]


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{key}` must be a positive integer in the model config; got {value!r}")
    return value


def _head_dim(config: Any, *, axial: bool) -> int:
    rope_part = _get(config, "qk_rope_head_dim")
    if rope_part is not _MISSING:
        return _int(rope_part, "qk_rope_head_dim")
    head_dim = _get(config, "head_dim")
    if head_dim is not _MISSING:
        return _int(head_dim, "head_dim")
    width_key = (
        "embed_dim" if axial and _get(config, "embed_dim") is not _MISSING else "hidden_size"
    )
    hidden = _get(config, width_key)
    heads = _get(config, "num_attention_heads")
    if hidden is _MISSING or heads is _MISSING:
        raise ValueError(
            "the model config needs `head_dim`, or `hidden_size` and `num_attention_heads`"
        )
    hidden, heads = _int(hidden, width_key), _int(heads, "num_attention_heads")
    if hidden % heads:
        raise ValueError(
            f"`{width_key}`={hidden} is not a multiple of `num_attention_heads`={heads}; "
            "give `head_dim` explicitly"
        )
    return hidden // heads


def _scaling_dict(config: Any) -> Mapping[str, Any] | None:
    key, scaling = _one_of(config, ("rope_parameters", "rope_scaling"))
    if scaling is _MISSING:
        return None
    if not isinstance(scaling, Mapping):
        raise TypeError(f"`{key}` must be a dict in the model config; got {scaling!r}")
    return scaling


def from_hf_config(config: Any) -> HFRopeConfig:
    """Read the RoPE settings of a Hugging Face model config.

    Parameters
    ----------
    config : Mapping or object
        A parsed ``config.json`` or an object with those attributes.

    Returns
    -------
    HFRopeConfig
        The head and rotary widths, base, pairing, ``max_position_embeddings`` and the
        parsed :class:`~anyrope.scaling.RopeScaling` of the model.

    Raises
    ------
    ValueError, TypeError
        For a missing, malformed or contradictory key, named in the message.

    Examples
    --------
    >>> from anyrope.scaling import from_hf_config
    >>> settings = from_hf_config({"hidden_size": 6144, "num_attention_heads": 64,
    ...                            "rotary_pct": 0.25, "rotary_emb_base": 10000,
    ...                            "max_position_embeddings": 2048})
    >>> settings.head_dim, settings.rotary_dim, settings.base
    (96, 24, 10000.0)
    """
    scaling = _scaling_dict(config)
    inner = {} if scaling is None else scaling
    theta_key, theta = _one_of(config, ("rope_theta", "rotary_emb_base"))
    if "rope_theta" in inner and inner["rope_theta"] is not None:
        if theta is not _MISSING and theta != inner["rope_theta"]:
            raise ValueError(
                f"`{theta_key}`={theta!r} and `rope_parameters['rope_theta']`="
                f"{inner['rope_theta']!r} disagree in the model config"
            )
        theta = inner["rope_theta"]
    base = 10000.0 if theta is _MISSING else check_base(theta)
    lmax_key = "max_position_embeddings"
    max_positions = _get(config, lmax_key)
    max_positions = None if max_positions is _MISSING else _int(max_positions, lmax_key)
    original = _get(config, "original_max_position_embeddings")
    original = None if original is _MISSING else _int(original, "original_max_position_embeddings")
    parsed = parse_rope_scaling(
        scaling, max_position_embeddings=max_positions, original_max_position_embeddings=original
    )
    head_dim = _head_dim(config, axial=parsed.rope_type == "axial")
    rotary_dim = _rotary_dim(config, inner, head_dim)
    parsed.check_rotary_dim(rotary_dim)
    interleave = _get(config, "rope_interleave")
    if interleave is _MISSING:
        interleaved = _get(config, "model_type") in _INTERLEAVED_MODEL_TYPES
    elif isinstance(interleave, bool):
        interleaved = interleave
    else:
        raise TypeError(
            f"`rope_interleave` must be true or false in the model config; got {interleave!r}"
        )
    return HFRopeConfig(
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        base=base,
        interleaved=interleaved,
        max_position_embeddings=max_positions,
        scaling=parsed,
    )


def _rotary_dim(config: Any, inner: Mapping[str, Any], head_dim: int) -> int:
    key, fraction = _one_of(config, ("partial_rotary_factor", "rotary_pct"))
    nested = inner.get("partial_rotary_factor")
    if nested is not None:
        if fraction is not _MISSING and fraction != nested:
            raise ValueError(
                f"`{key}`={fraction!r} and `rope_parameters['partial_rotary_factor']`={nested!r} "
                "disagree in the model config"
            )
        key, fraction = "partial_rotary_factor", nested
    if fraction is _MISSING:
        return head_dim
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not (math.isfinite(fraction) and 0.0 < fraction <= 1.0)
    ):
        raise ValueError(
            f"`{key}` must be a number in (0, 1] in the model config; got {fraction!r}"
        )
    rotary_dim = int(head_dim * fraction)
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(
            f"`{key}`={fraction!r} gives an odd or empty rotary width "
            f"int({head_dim} * {fraction}) = {rotary_dim}; it must be even and positive"
        )
    return rotary_dim
