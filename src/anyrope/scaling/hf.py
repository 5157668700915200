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
  ``int(head_dim * fraction)``), or GPT-J's and CodeGen's ``rotary_dim`` (the width
  itself, read for those families only; their ``n_embd`` / ``n_head`` give the head
  width);
- ``max_position_embeddings``, ``original_max_position_embeddings``;
- ``rope_parameters`` or ``rope_scaling`` (see :func:`~anyrope.scaling.parse_rope_scaling`);
- ``rope_interleave`` (DeepSeek); without it, the pairing of the family
  (:data:`INTERLEAVED_MODEL_TYPES` by ``model_type``: Cohere, GLM, ERNIE 4.5, Helium,
  Moonshine, Llama 4, DeepSeek and others pair ``(x[2i], x[2i+1])``);
- ``model_type`` also refuses families whose rotation anyrope does not model
  (:data:`NEGATIVE_ANGLE_MODEL_TYPES`);
- ``per_layer_config`` (transformers 5's per-layer overrides) and Gemma 4's
  ``global_head_dim``, for the layer type asked for;
- ``layer_types``, ``sliding_window`` and ``layer_rope_theta`` where the family's
  attention rotates some layers only, or each with its own base
  (:data:`SLIDING_ONLY_MODEL_TYPES`, :data:`LAYER_ROPE_THETA_MODEL_TYPES`).

Two sources of one value that disagree are an error naming both keys.

A ``config.json`` in an older format is first rewritten as transformers 5.23.0's config
class for its ``model_type`` rewrites it (:mod:`anyrope.scaling._hf_older`): Gemma 3's
``rope_local_base_freq``, ModernBERT's ``global_rope_theta`` / ``local_rope_theta``,
GPT-NeoX's defaults, Phi-3's ``"su"``, MiniMax-M2's ``rotary_dim``, each family's
default ``rope_theta`` and rotated fraction, and the others listed in docs/scaling.rst;
where transformers drops such a key or replaces it by a default, the error names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._validation import check_base, check_even
from ._checks import agreed, flag, positive_int
from ._checks import fraction as check_fraction
from ._hf_older import current_format, is_nested
from .config import RopeScaling, parse_rope_scaling

__all__ = ["HFRopeConfig", "from_hf_config", "from_hf_config_layers", "layer_types"]


def _with_text(*families: str) -> tuple[str, ...]:
    """Each family and its text model, ``<family>_text``, whose rotation is the same."""
    return tuple(name for family in families for name in (family, f"{family}_text"))


INTERLEAVED_MODEL_TYPES = frozenset(
    {
        # Their apply_rotary_pos_emb rotates (x[2i], x[2i+1]) (cos/sin repeat-interleaved).
        *("cohere", "cohere2", "cohere2_moe", "glm", "glm4", "ernie4_5", "ernie4_5_moe"),
        *_with_text("glm4v", "glm_ocr", "ernie4_5_vl_moe"),
        "helium",
        *("moonshine", "moonshine_streaming", "openai_privacy_filter"),
        # Perception Encoder audio and video towers: 2x2 rotation matrices of (x[2i], x[2i+1]).
        *("pe_audio_encoder", "pe_video_encoder", "pe_audio_video_encoder"),
        # GPT-J and CodeGen: rotate_every_two.
        *("gptj", "codegen"),
        # Meta's complex form.
        *_with_text("llama4"),
        "deepseek_v2",
        # DeepSeek's apply_rotary_pos_emb_interleave, whatever rope_interleave says
        # (their configs have no such key), or by default (DeepSeek-V3 and its kin).
        *_with_text("mistral_large4", "dots3_note"),
        *("bailing_hybrid", "glm_moe_dsa", "longcat_flash", "deepseek_v3", "deepseek_v32"),
        *("deepseek_v4", "axk1", "axk2", "youtu", "glm4_moe_lite", "kimi_k2"),
    }
)
"""Model families (``model_type``) that pair features ``(2i, 2i+1)``: a property of the
family's modeling code, not a config key. ``rope_interleave``, where a config has it,
decides instead (``tests/test_hf_families.py`` drives each family's own code)."""

ROTARY_DIM_MODEL_TYPES = frozenset({"gptj", "codegen"})
"""Families whose ``rotary_dim`` key is the rotated width. Others may carry the key and
ignore it (MiniMax-M3-VL's 64 of 128: transformers rotates all 128)."""

INTERLEAVED_MROPE_MODEL_TYPES = frozenset(
    {
        *_with_text("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen4_exp"),
        *_with_text("cosmos3_edge", "cohere_compass", "qwen3_omni_moe"),
        *("qwen3_omni_moe_thinker", "qwen3_omni_moe_talker_text"),
    }
)
"""Families whose M-RoPE gives the streams' pairs in turn (t, h, w, t, h, w, ...)
instead of contiguous runs of ``mrope_section`` pairs: a property of the family's
modeling code (``recomposition_frequencies``), whatever ``mrope_interleaved`` says.
Their configs read as ``mrope_interleaved=True`` (without ``mrope_section``, with the
family's fallback, :data:`MROPE_DEFAULT_SECTIONS`). Outside these families the key
decides."""

MROPE_DEFAULT_SECTIONS: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(
        (
            *_with_text("qwen2_vl", "qwen2_5_vl", "paddleocr_vl", "qwen2_5_omni"),
            "qwen2_5_omni_talker",
        ),
        (16, 24, 24),
    ),
    **dict.fromkeys(
        _with_text("qwen3_vl", "qwen3_vl_moe", "qwen3_omni_moe", "cosmos3_edge", "cohere_compass"),
        (24, 20, 20),
    ),
    **dict.fromkeys(_with_text("glm4v", "glm4v_moe", "glm_ocr", "glm_image"), (8, 12, 12)),
    **dict.fromkeys(_with_text("qwen3_5", "qwen3_5_moe", "qwen4_exp"), (11, 11, 10)),
    **dict.fromkeys(_with_text("ernie4_5_vl_moe"), (22, 22, 20)),
}
"""The ``mrope_section`` each M-RoPE family's rotary class takes when its config has none
(transformers 5.23.0): these families rotate by three position streams whatever the
config says. The families of :data:`INTERLEAVED_MROPE_MODEL_TYPES` take only the pairs
of the second and third streams from it (as many as there are); the first stream has
the rest."""

OWN_MROPE_MODEL_TYPES = frozenset(_with_text("ernie4_5_vl_moe", "hunyuan_vl"))
"""Families whose M-RoPE lays the streams out another way (ERNIE 4.5 VL reorders the
frequencies; HunYuan-VL cuts its sections from the table of both halves): their M-RoPE
configs are refused. (GLM-4.1V and GLM-OCR give each stream a contiguous run of pairs,
as anyrope does, with their pairs ``(x[2i], x[2i+1])``.)"""

GLOBAL_HEAD_DIM_MODEL_TYPES = frozenset(
    {"gemma4_text", "gemma4_unified_text", "diffusion_gemma_text", "embedding_gemma2"}
)
"""Families whose ``full_attention`` layers have heads of ``global_head_dim`` (512 when
the config does not say, as in transformers) unless ``per_layer_config`` says otherwise."""

_DEFAULT_GLOBAL_HEAD_DIM = 512

_PER_LAYER_KEYS = frozenset(
    {
        *("head_dim", "qk_rope_head_dim", "hidden_size", "num_attention_heads", "rotary_dim"),
        *("partial_rotary_factor", "rotary_pct", "rope_theta", "rope_parameters", "rope_scaling"),
        *("max_position_embeddings", "original_max_position_embeddings"),
    }
)
"""The keys of a ``per_layer_config`` override that change a layer's rotation."""

SLIDING_ONLY_MODEL_TYPES = frozenset({"cohere2", "cohere2_moe", "exaone4", "kolibri1"})
"""Families whose attention rotates q and k in its sliding-window layers only (EXAONE 4
and Kolibri in every layer of a model without a ``sliding_window``; Cohere2-MoE also in
its dense layers when ``prefix_dense_sliding_window_pattern`` is 1): their other layers
have no RoPE."""

NO_ROPE_LAYERS_MODEL_TYPES = frozenset(
    {"llama4", "llama4_text", "smollm3", "mistral_large4", "mistral_large4_text"}
)
"""Families whose attention rotates layer ``i`` only where ``no_rope_layers[i]`` is 1;
without the list, every ``no_rope_layer_interval``-th layer (4 unless given) does not
rotate, as their config classes fill it."""

LAYER_ROPE_THETA_MODEL_TYPES = frozenset({"granite_swa", "granitemoe_swa", "muse_spark_text"})
"""Families whose ``layer_rope_theta`` gives each layer its base, 0 for none (MuseSpark
reads only which layers are 0: the others take ``rope_theta``)."""

WHOLE_HEAD_MODEL_TYPES = frozenset(
    {
        *("afmoe", "arcee", "aria_text", "bitnet", "chameleon", "cohere", "cohere2"),
        *("cohere2_moe", "csm", "dbrx", "deepseek_ocr2_text", "dia_decoder", "diffllama", "doge"),
        *("dots1", "embedding_gemma2_text", "emu3_text_model", "ernie4_5", "ernie4_5_moe"),
        *("ernie4_5_vl_moe_text", "esmc", "eurobert", "evolla", "exaone4", "exaone_moe", "falcon"),
        *("falcon_h1", "flex_olmo", "flint", "gemma", "gemma2", "gemma3_text", "gemma3n_text"),
        *("gradium_phonon_tts", "granite", "granite4_vision_text", "granite_docling_text"),
        *("granite_swa", "granitemoe", "granitemoe_swa", "granitemoehybrid", "granitemoeshared"),
        *("gte", "helium", "hrm_text", "hunyuan_v1_dense", "hunyuan_v1_moe", "hy_v3"),
        *("hyperclovax", "idefics", "jais2", "jetmoe", "jina_embeddings_v3", "kolibri1"),
        *("kyutai_speech_to_text", "lfm2", "lfm2_moe", "llama", "llama4_text", "mimi", "minimax"),
        *("ministral", "mistral", "mixtral", "mllama_text_model", "modernbert"),
        *("modernbert-decoder", "molmo2_text", "moshi", "muse_glimmer_assistant"),
        *("muse_glimmer_text", "muse_spark_text", "neucodec", "nomic_bert", "olmo", "olmo2"),
        *("olmo3", "olmo_hybrid", "olmoe", "paddleocr_vl_text", "pe_audio_encoder"),
        *("pe_audio_video_encoder", "pe_video_encoder", "phimoe", "pocket_tts", "qwen2"),
        *("qwen2_5_omni_text", "qwen2_5_vl_text", "qwen2_moe", "qwen2_vl_text", "qwen3"),
        *("qwen3_moe", "qwen3_vl_moe_text", "qwen3_vl_text", "seed_oss", "smollm3", "starcoder2"),
        *("t5_gemma_module", "t5gemma2_decoder", "timesfm2_5", "ultrabert", "unlimited_ocr_text"),
        *("vaultgemma", "voxtral_realtime_text", "xcodec2", "zamba2", "beam[sliding_attention]"),
        *("gemma4_text[sliding_attention]", "gemma4_unified_text[sliding_attention]"),
        "lfm3[sliding_attention]",
    }
)
"""Families (``model_type``, or ``model_type[layer_type]`` where one layer type only)
whose default rotation turns the whole head whatever ``partial_rotary_factor`` says:
their rotary module ignores the fraction and their attention has no pass-through part.
A fraction below 1 there is refused (``tests/test_hf_families.py`` derives the list
from each family's own code)."""

NEGATIVE_ANGLE_MODEL_TYPES = frozenset({"nanochat"})
"""Families that rotate by ``-m theta``: their attention scores depend on ``n - m``
with the sign flipped, which no :class:`anyrope.RoPE` setting gives."""


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
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)[1:]}


def _read(config: Any) -> Any:
    """The parsed ``config.json`` of a path (the file, or the model folder holding it)."""
    if not isinstance(config, (str, os.PathLike)):
        return config
    path = Path(config)
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read the model config {str(path)!r}: {error.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"the model config {str(path)!r} is not JSON: {error}") from None


def _get(config: Any, key: str) -> Any:
    """``config[key]`` of a dict, else the attribute; ``None`` (absent) when it has neither."""
    return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)


def _setting(
    config: Any, keys: tuple[str, ...], inner: Mapping[str, Any] | None = None
) -> tuple[str, Any]:
    """The key and value of the first present of ``keys``, or of the scaling dict's
    ``keys[0]`` (newer configs keep it there); an error if two present sources disagree."""
    sources = [(key, _get(config, key)) for key in keys]
    if inner is not None:
        sources.append((f"rope_parameters['{keys[0]}']", inner.get(keys[0])))
    return agreed(sources, " in the model config")


def _int(config: Any, key: str) -> int | None:
    """The positive integer ``config[key]``, or ``None`` when the config lacks it."""
    value = _get(config, key)
    return None if value is None else positive_int(value, key)


def _head_dim(config: Any, *, axial: bool) -> int:
    width = _int(config, "qk_rope_head_dim") or _int(config, "head_dim")
    if width is not None:
        return width
    width_key = "embed_dim" if axial and _get(config, "embed_dim") is not None else "hidden_size"
    heads_key = "num_attention_heads"
    if _get(config, width_key) is None and _get(config, "n_embd") is not None:
        # GPT-J's and CodeGen's config.json names.
        width_key, heads_key = "n_embd", "n_head"
    hidden, heads = _int(config, width_key), _int(config, heads_key)
    if hidden is None or heads is None:
        raise ValueError(
            "the model config needs `head_dim`, or `hidden_size` and `num_attention_heads`"
        )
    if hidden % heads:
        raise ValueError(
            f"`{width_key}`={hidden} is not a multiple of `{heads_key}`={heads}; "
            "give `head_dim` explicitly"
        )
    return hidden // heads


def _scaling_dict(config: Any) -> Mapping[str, Any]:
    """The config's scaling dict, empty when it has none."""
    key, scaling = _setting(config, ("rope_parameters", "rope_scaling"))
    if scaling is not None and not isinstance(scaling, Mapping):
        raise TypeError(f"`{key}` must be a dict in the model config; got {scaling!r}")
    return scaling or {}


def layer_types(config: Any) -> tuple[str, ...] | None:
    """The layer types whose RoPE settings a config gives one by one, or ``None``.

    Gemma 3 and its kin nest ``rope_parameters`` by layer type (``{"full_attention":
    {...}, "sliding_attention": {...}}``), or give them in older keys
    (``rope_local_base_freq``, ModernBERT's ``global_rope_theta``, ...); such a config
    needs a ``layer_type`` to name one rotation.

    Parameters
    ----------
    config : Mapping, object, str or os.PathLike
        A parsed ``config.json``, an object with those attributes, or the path of a
        ``config.json`` (or of the model folder that holds it).

    Returns
    -------
    tuple of str or None
        The nested layer types, in the config's order; ``None`` for one set of
        settings for every layer.

    Examples
    --------
    >>> from anyrope.scaling import hf
    >>> hf.layer_types({"rope_parameters": {
    ...     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    ...     "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}})
    ('sliding_attention', 'full_attention')
    >>> hf.layer_types({"rope_theta": 10000.0}) is None
    True
    """
    scaling = _scaling_dict(current_format(_read(config)))
    return tuple(scaling) if is_nested(scaling) else None


def from_hf_config(config: Any, *, layer_type: str | None = None) -> HFRopeConfig:
    """Read the RoPE settings of a Hugging Face model config.

    Parameters
    ----------
    config : Mapping, object, str or os.PathLike
        A parsed ``config.json``, an object with those attributes, or the path of a
        ``config.json`` (or of the model folder that holds it).
    layer_type : str, optional
        For a config with settings per layer type
        (:func:`~anyrope.scaling.hf.layer_types`, e.g. Gemma 3's ``"full_attention"`` and
        ``"sliding_attention"``), the one to read; required
        there. For a config with one set of settings it may name any layer type of
        ``config.layer_types``: every layer gets the same rotation.

    Returns
    -------
    HFRopeConfig
        The head and rotary widths, base, pairing, ``max_position_embeddings`` and the
        parsed :class:`~anyrope.RopeScaling` of the model.

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
    config = _as_layer_type_sees_it(current_format(_read(config)), layer_type)
    scaling = _layer_scaling(config, layer_type)
    model_type = _get(config, "model_type")
    _refuse(model_type, scaling)
    theta = _layer_base(config, layer_type)
    if theta is None:
        theta = _setting(config, ("rope_theta", "rotary_emb_base"), scaling)[1]
    else:
        # transformers builds these layers' rotary module from the settings with this base.
        scaling = {**scaling, "rope_theta": theta}
    base = 10000.0 if theta is None else check_base(theta)
    max_positions = _int(config, "max_position_embeddings")
    original = _int(config, "original_max_position_embeddings")
    nested = is_nested(_scaling_dict(config))
    parsed = parse_rope_scaling(
        scaling,
        max_position_embeddings=max_positions,
        # transformers fills a layer type's settings from max_position_embeddings alone.
        original_max_position_embeddings=None if nested else original,
    )
    if nested and original is not None and parsed.original_max_position_embeddings is not None:
        filled = parsed.original_max_position_embeddings
        if "original_max_position_embeddings" not in scaling and filled != original:
            raise ValueError(
                f"`original_max_position_embeddings`={original} at the top level of a model "
                "config with settings per layer type: transformers does not read it there, "
                f"and gives layer type {layer_type!r} `max_position_embeddings`={filled}; "
                "give it in that layer type's settings"
            )
    head_dim = _head_dim(config, axial=parsed.rope_type == "axial")
    whole = model_type in WHOLE_HEAD_MODEL_TYPES or f"{model_type}[{layer_type}]" in (
        WHOLE_HEAD_MODEL_TYPES
    )
    key, fraction = _setting(config, ("partial_rotary_factor", "rotary_pct"), scaling)
    # Before the width it gives is checked: any fraction below 1 is refused there.
    narrowed = isinstance(fraction, (int, float)) and 0 < fraction < 1
    if whole and parsed.rope_type == "default" and narrowed:
        raise ValueError(
            f"`{key}`={fraction!r} in a model_type={model_type!r} config: the family's "
            "rotation turns the whole head (transformers ignores the fraction there); drop "
            "the key to read the rotation transformers gives"
        )
    rotary_dim = _rotary_dim(config, scaling, head_dim, parsed.partial_rotary_factor_sets_width)
    if _get(config, "qk_rope_head_dim") is not None and parsed.partial_rotary_factor:
        # The fraction was of the full head_dim and is now the rope part's whole width.
        parsed = dataclasses.replace(parsed, partial_rotary_factor=None)
    parsed = _family_sections(parsed, model_type, rotary_dim)
    parsed.check_rotary_dim(rotary_dim)
    if model_type in INTERLEAVED_MROPE_MODEL_TYPES and parsed.mrope_section is not None:
        parsed = dataclasses.replace(parsed, mrope_interleaved=True)
    interleaved = _get(config, "rope_interleave")
    if interleaved is None:
        interleaved = model_type in INTERLEAVED_MODEL_TYPES
    flag(interleaved, "rope_interleave")
    return HFRopeConfig(head_dim, rotary_dim, base, interleaved, max_positions, parsed)


def _family_sections(parsed: RopeScaling, model_type: Any, rotary_dim: int) -> RopeScaling:
    """``parsed`` with the sections its family's code falls back to when the config gives
    none (:data:`MROPE_DEFAULT_SECTIONS`)."""
    fallback = MROPE_DEFAULT_SECTIONS.get(model_type)
    if fallback is None or parsed.mrope_section is not None or parsed.rope_type == "axial":
        return parsed
    pairs = rotary_dim // 2
    if model_type in INTERLEAVED_MROPE_MODEL_TYPES:
        # Their code gives pair i to stream s = i % 3 (s = 1, 2) while i < 3 * sections[s],
        # and the other pairs to the first stream, whatever the sections add up to.
        taken = [len(range(s, min(3 * fallback[s], pairs), 3)) for s in (1, 2)]
        fallback = (pairs - sum(taken), *taken)
    elif sum(fallback) != pairs:
        raise ValueError(
            f"a model_type={model_type!r} config without `mrope_section`: the family's code "
            f"splits its {pairs} rotated pairs by its fallback {list(fallback)}, which does "
            "not cover them (transformers fails on every call); give `mrope_section` in "
            "`rope_parameters`"
        )
    return dataclasses.replace(parsed, mrope_section=fallback)


def from_hf_config_layers(config: Any) -> dict[str, HFRopeConfig | None]:
    """Read the RoPE settings of every layer type of a Hugging Face model config.

    Parameters
    ----------
    config : Mapping, object, str or os.PathLike
        A parsed ``config.json``, an object with those attributes, or the path of a
        ``config.json`` (or of the model folder that holds it).

    Returns
    -------
    dict
        Layer type -> its :class:`HFRopeConfig`, or ``None`` for a layer type without
        RoPE (``null`` settings, or layers the family does not rotate:
        :data:`SLIDING_ONLY_MODEL_TYPES`, ``layer_rope_theta`` 0). A config with one set
        of settings gives it for each of its ``layer_types``, or under ``"default"``
        when it lists none.

    Examples
    --------
    >>> from anyrope.scaling.hf import from_hf_config_layers
    >>> layers = from_hf_config_layers({"head_dim": 64, "layer_types": ["a", "b", "a"]})
    >>> list(layers), layers["a"] == layers["b"]
    (['a', 'b'], True)
    """
    config = current_format(_read(config))
    scaling = _scaling_dict(config)
    if is_nested(scaling):
        return {
            name: None if values is None else from_hf_config(config, layer_type=name)
            for name, values in scaling.items()
        }
    per_layer = _layer_rotations(config)
    kinds = _get(config, "layer_types")
    if per_layer is None:
        return dict.fromkeys(kinds or ["default"], from_hf_config(config))
    return {
        name: None
        if all(not r for r, kind in zip(per_layer, kinds, strict=True) if kind == name)
        else from_hf_config(config, layer_type=name)
        for name in dict.fromkeys(kinds)
    }


def _layer_rotations(config: Any) -> list[float | bool] | None:
    """Per layer, as the family's attention rotates it: ``False`` for no RoPE, a float
    for a base of its own, ``True`` for the config's rotation; ``None`` for a config whose
    layers all rotate alike."""
    model_type = _get(config, "model_type")
    if model_type in NO_ROPE_LAYERS_MODEL_TYPES:
        flags = _get(config, "no_rope_layers")
        count = _get(config, "num_hidden_layers")
        if not flags and count is None:
            raise ValueError(
                f"a model_type={model_type!r} config needs `no_rope_layers`, or "
                "`num_hidden_layers` to derive it: the family skips the rotation in every "
                "`no_rope_layer_interval`-th layer"
            )
        if not flags:
            interval = _get(config, "no_rope_layer_interval") or 4
            flags = [(layer + 1) % interval != 0 for layer in range(count)]
        return [bool(flag) for flag in flags]
    if model_type in LAYER_ROPE_THETA_MODEL_TYPES:
        thetas = _get(config, "layer_rope_theta")
        if thetas is None:
            return None
        own = model_type != "muse_spark_text"
        return [False if not theta else (float(theta) if own else True) for theta in thetas]
    if model_type not in SLIDING_ONLY_MODEL_TYPES:
        return None
    kinds = _get(config, "layer_types")
    if not kinds:
        raise ValueError(
            f"a model_type={model_type!r} config needs `layer_types`: the family rotates "
            "its sliding-window layers only"
        )
    window = _get(config, "sliding_window")
    if window is None and model_type in ("exaone4", "kolibri1"):
        return None
    forced = [False] * len(kinds)
    if (
        model_type == "cohere2_moe"
        and (_get(config, "prefix_dense_sliding_window_pattern") or 1) == 1
    ):
        forced = [mlp == "dense" for mlp in _get(config, "mlp_layer_types") or forced]
    return [
        (window is not None and kind == "sliding_attention") or force
        for kind, force in zip(kinds, forced, strict=True)
    ]


def _layer_base(config: Any, layer_type: str | None) -> float | None:
    """The base the layers of ``layer_type`` (every layer for ``None``) have of their own,
    ``None`` for the config's; an error where they have no RoPE or differ."""
    model_type = _get(config, "model_type")
    sliding_only = model_type in SLIDING_ONLY_MODEL_TYPES
    if layer_type is None and (
        (sliding_only and not _get(config, "layer_types"))
        or model_type in NO_ROPE_LAYERS_MODEL_TYPES
    ):
        # The layers that rotate take the config's rotation, whichever they are.
        return None
    per_layer = _layer_rotations(config)
    if per_layer is None:
        return None
    kinds = _get(config, "layer_types") or [None] * len(per_layer)
    if len(kinds) != len(per_layer):
        raise ValueError(
            f"the model config's `layer_rope_theta` has {len(per_layer)} entries and its "
            f"`layer_types` {len(kinds)}"
        )
    chosen = {
        r
        for r, kind in zip(per_layer, kinds, strict=True)
        if layer_type is None or kind == layer_type
    }
    if layer_type is None:
        # The rotation of the layers that rotate, as the family's rotary module gives it.
        chosen.discard(False)
    if chosen == {False} or not chosen:
        where = "any layer" if layer_type is None else f"its {layer_type!r} layers"
        raise ValueError(
            f"model_type={_get(config, 'model_type')!r} does not rotate {where} in this model "
            "config (its attention skips the rotation); anyrope.RoPE.from_hf_config_layers "
            "gives None for such a layer type"
        )
    if len(chosen) > 1:
        which = "its layers" if layer_type is None else f"its {layer_type!r} layers"
        advice = (
            f"pass layer_type= one of {', '.join(map(repr, sorted(set(kinds))))}"
            if layer_type is None
            else "anyrope reads one rotation per layer type"
        )
        raise ValueError(
            f"model_type={_get(config, 'model_type')!r} rotates {which} in different ways in "
            "this model config (`layer_rope_theta`, or layers with and without RoPE: "
            f"Cohere2-MoE's dense prefix, `no_rope_layers`); {advice}"
        )
    (rotation,) = chosen
    return None if rotation is True else float(rotation)


def _as_layer_type_sees_it(config: Any, layer_type: str | None) -> Any:
    """The config with the per-layer overrides of ``layer_type`` applied.

    transformers 5 configs may override keys per layer (``per_layer_config``, keyed by
    layer index): Gemma 4's full-attention layers have wider heads. A config object
    resolves them itself (``config.per_layer_config[layer_type]``, as its rotary module
    does); a dict is resolved here, and a Gemma 4 ``config.json`` without
    ``per_layer_config`` gives its full-attention layers ``global_head_dim``.
    """
    if not isinstance(config, Mapping):
        per_layer: Any = getattr(config, "per_layer_config", None)
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError):
            if layer_type is not None and per_layer is not None:
                return per_layer[layer_type]
        return config
    overrides = config.get("per_layer_config")
    if not overrides:
        wide = config.get("model_type") in GLOBAL_HEAD_DIM_MODEL_TYPES
        if wide and layer_type == "full_attention":
            return {**config, "head_dim": config.get("global_head_dim") or _DEFAULT_GLOBAL_HEAD_DIM}
        return config
    types = config.get("layer_types") or []
    by_layer = {
        int(index): {key: value for key, value in values.items() if key in _PER_LAYER_KEYS}
        for index, values in overrides.items()
    }
    rope_keys = set().union(*by_layer.values())
    if not rope_keys:
        return config
    if layer_type is None:
        raise ValueError(
            f"the model config's `per_layer_config` changes {', '.join(sorted(rope_keys))} "
            "for some layers; pass layer_type= one of "
            f"{', '.join(map(repr, sorted(set(types))))}"
        )
    chosen = [by_layer.get(i, {}) for i, kind in enumerate(types) if kind == layer_type]
    if any(values != chosen[0] for values in chosen):
        raise ValueError(
            f"the layers of type {layer_type!r} differ in their `per_layer_config` RoPE keys "
            f"({', '.join(sorted(rope_keys))}); anyrope reads one rotation per layer type"
        )
    return {**config, **(chosen[0] if chosen else {})}


def _refuse(model_type: Any, inner: Mapping[str, Any]) -> None:
    """Refuse a family or a key whose rotation anyrope does not model."""
    if model_type in NEGATIVE_ANGLE_MODEL_TYPES:
        raise ValueError(
            f"model_type={model_type!r} rotates by the negative angle (-m * theta_i), "
            "which anyrope.RoPE does not model; rotating with inverse=True gives it "
            "(there is no attention factor in this family's rotation)"
        )
    own = inner.get("mrope_section") or MROPE_DEFAULT_SECTIONS.get(model_type)
    if model_type in OWN_MROPE_MODEL_TYPES and own is not None:
        raise ValueError(
            f"model_type={model_type!r} lays out its M-RoPE streams in its own way, which "
            "anyrope does not model: anyrope's mrope_section gives each stream a contiguous "
            "run of pairs, or the pairs in turn with mrope_interleaved (Qwen3-VL)"
        )
    beta = inner.get("llama_4_scaling_beta")
    if beta is not None:
        raise ValueError(
            f"`rope_parameters['llama_4_scaling_beta']`={beta!r} is Llama 4's attention "
            "temperature: transformers multiplies the queries, after the rotation, by "
            "1 + beta * log(1 + floor(position / original_max_position_embeddings)), which a "
            "RoPE does not do. anyrope does not model it: drop the key to read the rotation "
            "alone and scale the queries in your attention"
        )


def _layer_scaling(config: Any, layer_type: str | None) -> Mapping[str, Any]:
    """The scaling dict of ``layer_type`` (or of every layer), checked against the config."""
    scaling = _scaling_dict(config)
    known = tuple(scaling) if is_nested(scaling) else _get(config, "layer_types")
    if layer_type is not None and known is not None and layer_type not in known:
        raise ValueError(
            f"`layer_type`={layer_type!r} is not one of the model config's layer types "
            f"({', '.join(map(repr, sorted(set(known))))})"
        )
    if not is_nested(scaling):
        return scaling
    if layer_type is None:
        raise ValueError(
            f"the model config gives RoPE settings per layer type ({', '.join(map(repr, known))}); "
            "pass layer_type= one of them, or use anyrope.RoPE.from_hf_config_layers(config) "
            "for every layer type at once"
        )
    settings = scaling[layer_type]
    if settings is None:
        raise ValueError(
            f"layer type {layer_type!r} has no RoPE in the model config "
            f"(`rope_parameters[{layer_type!r}]` is null)"
        )
    if settings.get("rope_type") == "yarn" and settings.get("truncate") is False:
        raise ValueError(
            f"`rope_parameters[{layer_type!r}]['truncate']`=False: transformers 5.23 reads "
            "`truncate` from the top level of `rope_parameters` only, so these layers "
            "truncate their YaRN ramp; drop the key to read the rotation transformers gives"
        )
    return dict(settings)


def _rotary_dim(config: Any, inner: Mapping[str, Any], head_dim: int, narrows: bool) -> int:
    """The rotated width: GPT-J's and CodeGen's ``rotary_dim`` (the features, counted), or
    ``int(head_dim * partial_rotary_factor)`` where the method's fraction ``narrows`` the
    width (else the whole head), or all of a latent-attention model's ``qk_rope_head_dim``
    (``head_dim`` here)."""
    key, fraction = _setting(config, ("partial_rotary_factor", "rotary_pct"), inner)
    explicit = _get(config, "model_type") in ROTARY_DIM_MODEL_TYPES
    rotary_dim = _int(config, "rotary_dim") if explicit else None
    if rotary_dim is not None:
        if fraction is not None:
            raise ValueError(
                f"the model config gives both `rotary_dim`={rotary_dim} and `{key}`; "
                "keep one of them"
            )
        return check_even(rotary_dim, "rotary_dim", head_dim)
    if fraction is None or not narrows:
        return head_dim
    fraction = check_fraction(fraction, key)
    # A latent-attention model (DeepSeek, Mistral 4, dots) rotates all of its rope part,
    # `qk_rope_head_dim` (`head_dim` here); the fraction is of the full head_dim
    # (transformers builds the frequencies from int(head_dim * factor)), so the two must agree.
    latent = _get(config, "qk_rope_head_dim") is not None
    full = _int(config, "head_dim") if latent else head_dim
    if full is None:
        raise ValueError(
            f"`{key}`={fraction!r} with `qk_rope_head_dim`={head_dim} needs `head_dim` "
            "in the model config, the width the fraction is of"
        )
    rotary_dim = int(full * fraction)
    if latent and rotary_dim != head_dim:
        raise ValueError(
            f"`{key}`={fraction!r} of `head_dim`={full} is {rotary_dim} features, "
            f"but `qk_rope_head_dim` is {head_dim}: the model config disagrees on the "
            "rotary width"
        )
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(
            f"`{key}`={fraction!r} gives an odd or empty rotary width "
            f"int({full} * {fraction}) = {rotary_dim}; it must be even and positive"
        )
    return rotary_dim
