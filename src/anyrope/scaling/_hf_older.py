"""Older ``config.json`` formats, rewritten in the current one as transformers reads them.

Checkpoints on the Hub keep the keys of the transformers release that saved them:
Gemma 3's ``rope_local_base_freq``, ModernBERT's ``global_rope_theta`` and
``local_rope_theta``, GPT-NeoX's ``rotary_emb_base`` and ``rotary_pct``, Phi-3's
``"su"`` scaling, MiniMax-M2's ``rotary_dim``, HunYuan-VL's ``"xdrope"``... transformers'
config classes (5.23.0) convert them into ``rope_parameters`` (per layer type where the
family has several), each family its own way, and fill what a config leaves out from
the family's defaults. :func:`current_format` does the same to a parsed ``config.json``
before :mod:`anyrope.scaling.hf` reads it, so that every layer type gets the rotation
transformers gives it. A form transformers reads in a way no config means (a key it
drops, a value it replaces by its default) is an error naming the key, never a silent
difference.

A transformers config object is returned unchanged (it converted its keys when it was
built); another object (a namespace of ``config.json``'s keys) is read as that dict.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ._checks import agreed

DEFAULT_ROPE_THETA = {
    family: value
    for value, families in {
        100.0: ("dinov3_vit", "eomt_dinov3", "gemma4_vision", "sapiens2"),
        1_000.0: ("nomic_bert",),
        1_200.0: ("musicflamingo",),
        20_000.0: (
            *("jina_embeddings_v3", "pe_audio_encoder"),
            *("pe_audio_video_encoder", "pe_video_encoder"),
        ),
        25_000.0: ("fuyu",),
        100_000.0: ("helium",),
        150_000.0: ("gpt_oss", "openai_privacy_filter"),
        160_000.0: ("gte",),
        500_000.0: (
            *("bitnet", "blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder"),
            *("cohere", "csm", "csm_depth_decoder_model", "ernie4_5", "ernie4_5_moe"),
            *("ernie4_5_vl_moe_text", "evolla", "flex_olmo", "llama4_text", "mllama_text_model"),
            *("muse_glimmer_assistant", "muse_spark_text", "olmo3", "paddleocr_vl_text"),
            *("qwen3_vl_moe_text", "qwen3_vl_text"),
        ),
        1_000_000.0: (
            *("cwm", "emu3_text_model", "lfm2", "lfm2_moe", "lfm3", "lfm3_vl_vision", "minimax"),
            *("mixtral", "phimoe", "qwen2_5_omni_talker", "qwen2_5_omni_text", "qwen2_5_vl_text"),
            *("qwen2_vl_text", "qwen3_omni_moe_text", "solar_open"),
        ),
        2_000_000.0: ("smollm3",),
        5_000_000.0: ("minimax_m2", "minimax_m3_vl_text"),
        6_000_000.0: ("bailing_hybrid",),
        10_000_000.0: ("longcat_flash",),
        11_158_840.0: ("hy_v3",),
        12_000_000.0: ("apertus",),
        80_000_000.0: ("dots3_note_text",),
        100_000_000.0: ("cosmos3_edge_text",),
    }.items()
    for family in families
}
"""transformers' ``rope_theta`` of each family (``model_type``) whose default is not 10000:
a config without ``rope_theta`` gets it, as transformers gives it."""

_TRANSFORMERS_DEFAULT_THETA = 10_000.0

DEFAULT_PARTIAL_ROTARY_FACTOR = {
    family: value
    for value, families in {
        0.2: ("musicflamingo",),
        0.25: ("qwen3_5_moe_text", "qwen3_5_text", "qwen3_next", "stablelm"),
        0.5: (
            *("bamba", "dots3_note_audio_encoder", "glm", "glm4", "glm4_moe", "glm4v_moe_text"),
            *("glmasr_encoder", "nemotron", "nemotron3_5_transcribe_asr_audio"),
            *("nemotron3_5_transcribe_word_timestamp", "persimmon", "phi", "recurrent_gemma"),
        ),
        0.8: ("moonshine_streaming",),
        0.9: ("moonshine",),
        4.0: ("efficientloftr",),
    }.items()
    for family in families
}
"""transformers' rotated fraction of each family whose default is not the whole head (GPT-NeoX
and the latent-attention families, whose fraction follows from other keys, aside): a
config without ``partial_rotary_factor`` gets it, as transformers gives it."""

AXIAL_MODEL_TYPES = frozenset(
    {
        *("cohere_compass_vision", "dots3_note_vision_encoder", "edgetam_video"),
        *("ernie4_5_vl_moe_vision", "exaone4_5_vision", "gemma4_vision", "glm4v_moe_vision"),
        *("glm4v_vision", "glm5_next_vision", "glm_image_vision", "glm_ocr_vision"),
        *("inkling2_vision", "kimi_k25_vision", "lfm3_vl_vision", "minimax_m3_vl_vision"),
        *("mlcd_vision_model", "muse_glimmer_vision", "muse_spark_vision", "paddleocr_vl_vision"),
        *("pixtral", "qwen2_5_omni_vision_encoder", "qwen2_5_vl_vision", "qwen2_vl_vision"),
        *("qwen3_5_moe_vision", "qwen3_5_vision", "qwen3_omni_moe_vision_encoder"),
        *("qwen3_vl_moe_vision", "qwen3_vl_vision", "qwen4_exp_vision", "sam2_video"),
        *("sam3_tracker_video", "sam3_vit_model", "step3p5_vision", "video_llama_3_vision"),
    }
)
"""Vision towers whose ``rope_type`` transformers reads as ``"axial"`` when a config says
``"default"`` or nothing (older checkpoints say nothing): 2-D patch positions."""

_BOTH_KINDS = ("sliding_attention", "full_attention")

# Gemma 3 and its kin keep the settings of full-attention layers in the older top-level
# keys, those of sliding-window layers in another key (OLMo 3 in the same one), and scale
# the full-attention layers only (ModernBERT scales both): (full key, default), (sliding
# key, default), scaled.
_TWO_KINDS: dict[str, tuple[tuple[str, float], tuple[str, float], tuple[str, ...]]] = {
    **dict.fromkeys(
        ("gemma3_text", "gemma3n_text", "t5gemma2_text", "t5gemma2_decoder"),
        (("rope_theta", 1_000_000.0), ("rope_local_base_freq", 10_000.0), ("full_attention",)),
    ),
    **dict.fromkeys(
        ("modernbert", "modernbert-decoder"),
        (("global_rope_theta", 160_000.0), ("local_rope_theta", 10_000.0), _BOTH_KINDS),
    ),
    "olmo3": (("rope_theta", 500_000.0), ("rope_theta", 500_000.0), ("full_attention",)),
}

# GPT-NeoX's names for the base and the rotated fraction, and its default fraction.
_NEOX_ROTARY_PCT = {"gpt_neox": 0.25, "gpt_neox_japanese": 1.0}

# Families whose config class reads `rope_parameters` alone: without it, transformers
# gives every layer type the family's own built-in settings and ignores `rope_theta`.
_RETURNS_ONLY_ROPE_PARAMETERS = frozenset(
    {
        *("beam", "diffusion_gemma_text", "embedding_gemma2_text", "gemma4_text"),
        *("gemma4_unified_text", "laguna", "mellum", "mimo_v2_flash"),
    }
)

# Families whose config class gives its built-in `rope_parameters` to a config with
# neither them nor `rope_scaling`, and then does not read `rope_theta`.
_BUILT_IN_ROPE_PARAMETERS = frozenset(
    {"moonshine_streaming", "muse_spark_text", "nemotron3_5_transcribe_asr_audio"}
)

# Families whose config class gives a config without `rope_parameters` or `rope_scaling`
# built-in settings that scale the frequencies (Apertus' llama3, gpt-oss' yarn, ...):
# such a config is refused, not filled in.
BUILT_IN_SCALING = frozenset(
    {
        *("apertus", "cwm", "gpt_oss", "higgs_audio_v2", "ministral3", "mistral4"),
        *("mistral_large4_text", "openai_privacy_filter"),
    }
)

# NeoMME's settings per layer type when its config leaves them out: (rope_theta, fraction).
_NEOMME_DEFAULTS = {"full_attention": (1_000_000.0, 0.25), "sliding_attention": (10_000.0, 1.0)}


def current_format(config: Any) -> Any:
    """The config with its older keys in the current format, as transformers reads them.

    Parameters
    ----------
    config : Mapping or object
        A parsed ``config.json``, a transformers config (returned as it is) or another
        object with the same attributes.

    Returns
    -------
    Mapping or object
        A new dict when anything changed (the caller's config is never modified), else
        ``config``.

    Raises
    ------
    ValueError
        For an older key that transformers drops or replaces by its default, named in the
        message with what to write instead.
    """
    if not isinstance(config, Mapping):
        attributes = getattr(config, "__dict__", None)
        # A transformers config converted its keys when it was built.
        if attributes is None or callable(getattr(config, "standardize_rope_params", None)):
            return config
        converted = current_format(attributes)
        return config if converted is attributes else converted
    model_type = str(config.get("model_type") or "")
    out = dict(config)
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(out.get(key), Mapping):
            out[key] = copy.deepcopy(dict(out[key]))
    convert = _CONVERTERS.get(model_type)
    if convert is not None:
        convert(out, model_type)
    if model_type in DEFAULT_ROPE_THETA:
        _fill_default_theta(out, model_type)
    if model_type in DEFAULT_PARTIAL_ROTARY_FACTOR:
        _fill_default_fraction(out, model_type)
    if model_type in AXIAL_MODEL_TYPES:
        _axial_by_default(out)
    return out if out != config else config


def _present(config: Mapping[str, Any], key: str) -> bool:
    return config.get(key) is not None


def _flat_scaling(config: dict[str, Any]) -> dict[str, Any]:
    """The one scaling dict (``rope_scaling`` first, as transformers takes it), now the
    config's ``rope_parameters``."""
    scaling = config.pop("rope_scaling", None) or config.get("rope_parameters") or {}
    config["rope_parameters"] = scaling
    return scaling


def is_nested(scaling: Mapping[str, Any]) -> bool:
    """Whether the settings are given per layer type (every value a dict or null)."""
    return bool(scaling) and all(
        isinstance(value, Mapping) or value is None for value in scaling.values()
    )


def _setdefault(scaling: dict[str, Any], key: str, value: Any) -> None:
    """Give the settings (each layer type's, where they are given per layer type) ``key``
    where they lack it."""
    for values in scaling.values() if is_nested(scaling) else [scaling]:
        if values is not None:
            values.setdefault(key, value)


def _two_kinds(config: dict[str, Any], model_type: str) -> None:
    """Gemma 3, Gemma 3n, T5Gemma 2, ModernBERT and OLMo 3: ``rope_scaling`` and two bases."""
    (full_key, full_default), (sliding_key, sliding_default), scaled = _TWO_KINDS[model_type]
    params = config["rope_parameters"] = config.get("rope_parameters") or {}
    if params and not is_nested(params):
        flat = sorted(key for key, value in params.items() if not isinstance(value, Mapping))
        raise ValueError(
            f"model_type={model_type!r} gives RoPE settings per layer type {_BOTH_KINDS}: "
            f"transformers ignores the keys {flat} of a flat `rope_parameters` and uses its "
            "defaults; give `rope_parameters` per layer type"
        )
    for name in _BOTH_KINDS:
        if params.get(name) is None:
            params[name] = {"rope_type": "default"}
    scaling = config.pop("rope_scaling", None) or {}
    if _present(scaling, "type") and not _present(scaling, "rope_type"):
        raise ValueError(
            f"`rope_scaling`={dict(scaling)!r}: transformers reads model_type="
            f"{model_type!r}'s `rope_scaling` into settings that already say "
            "rope_type='default', so its older `type` key is ignored and the layers are "
            "not scaled; name the method `rope_type` (or drop the scaling) to say which "
            "is meant"
        )
    for name in scaled:
        params[name].update(scaling)
    theta = config.pop(full_key, full_default)
    sliding = params["sliding_attention"]
    if sliding_key == full_key and theta != sliding_default and "rope_theta" not in sliding:
        # OLMo 3: transformers 5.23.0 takes the key for the full-attention layers, then finds
        # it gone and gives the sliding-window layers the default.
        raise ValueError(
            f"`{full_key}`={theta!r} of a model_type={model_type!r} config without "
            "per-layer `rope_parameters`: transformers gives it to the full-attention "
            f"layers and its default {sliding_default:g} to the sliding-window layers; "
            "give `rope_parameters` per layer type (full_attention, sliding_attention) "
            "with the base of each"
        )
    params["full_attention"].setdefault("rope_theta", theta)
    sliding.setdefault("rope_theta", config.pop(sliding_key, sliding_default))


def _gpt_neox(config: dict[str, Any], model_type: str) -> None:
    """GPT-NeoX: ``rotary_emb_base`` and ``rotary_pct`` (0.25 when absent; 1.0 in the
    Japanese model), the only top-level names its config class reads."""
    scaling = _flat_scaling(config)
    older = {
        "rope_theta": ("rotary_emb_base", _TRANSFORMERS_DEFAULT_THETA),
        "partial_rotary_factor": ("rotary_pct", _NEOX_ROTARY_PCT[model_type]),
    }
    for key, (older_key, default) in older.items():
        value = scaling.setdefault(key, config.pop(older_key, default))
        if _present(config, key) and config[key] != value:
            raise ValueError(
                f"`{key}`={config[key]!r} in a model_type={model_type!r} config: transformers "
                f"ignores this key for the family and reads `{older_key}` (here {value!r}); "
                f"give `{older_key}` instead"
            )
        config.pop(key, None)


def _rename_method(scaling: dict[str, Any], older: Collection[str], name: str) -> None:
    """Name the scaling method ``name`` where the dict names it one of ``older``."""
    if scaling.get("rope_type", scaling.get("type", "default")) in older:
        scaling.pop("type", None)
        scaling["rope_type"] = name


_LENGTH_SCALED = ("llama3", "yarn", "longrope")
"""The methods for which transformers moves a top-level ``original_max_position_embeddings``
into the scaling settings."""

_PHI3_ORIGINAL_MAX = 4096
"""The top-level ``original_max_position_embeddings`` of Phi-3's and Phi-4-multimodal's
config classes when a config has none."""


def _phi3(config: dict[str, Any], model_type: str) -> None:
    """Phi-3's (and Phi-4-multimodal's) older ``"su"`` and ``"yarn"`` scaling are its
    ``"longrope"``. Their config classes hold a top-level
    ``original_max_position_embeddings`` (4096 unless given), which transformers reads for
    a scaled rotation in place of the one in the scaling settings."""
    scaling = _flat_scaling(config)
    _rename_method(scaling, ("su", "yarn"), "longrope")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if _present(config, "original_max_position_embeddings") or kind not in _LENGTH_SCALED:
        return
    inner = scaling.get("original_max_position_embeddings")
    if inner is not None and inner != _PHI3_ORIGINAL_MAX:
        raise ValueError(
            f"`rope_parameters['original_max_position_embeddings']`={inner!r} in a "
            f"model_type={model_type!r} config without one at the top level: transformers "
            f"reads the config class's top-level default, {_PHI3_ORIGINAL_MAX}, instead; "
            "give the top-level `original_max_position_embeddings`"
        )
    config["original_max_position_embeddings"] = _PHI3_ORIGINAL_MAX


def _minimax_m2(config: dict[str, Any], model_type: str) -> None:
    """MiniMax-M2's ``rotary_dim``: the fraction ``rotary_dim / head_dim`` of the head."""
    rotary_dim = config.pop("rotary_dim", None)
    if rotary_dim is None or _present(config, "partial_rotary_factor"):
        return
    head_dim = config.get("head_dim")
    if head_dim is None:
        raise ValueError(
            f"`rotary_dim`={rotary_dim!r} of a model_type='minimax_m2' config needs "
            "`head_dim`: transformers reads it as the fraction rotary_dim / head_dim"
        )
    config["partial_rotary_factor"] = rotary_dim / head_dim


def _hunyuan_vl(config: dict[str, Any], model_type: str) -> None:
    """HunYuan-VL's ``"xdrope"`` is dynamic NTK with M-RoPE's ``xdrope_section``."""
    scaling = _flat_scaling(config)
    section = scaling.pop("xdrope_section", None)
    if section is not None:
        given = [("mrope_section", scaling.get("mrope_section")), ("xdrope_section", section)]
        agreed(given, " in the model config")
        scaling["mrope_section"] = [int(s) for s in section]
    _rename_method(scaling, ("xdrope",), "dynamic")


def _layer_kinds(config: Mapping[str, Any], model_type: str) -> list[str]:
    declared = config.get("layer_types")
    if not declared:
        raise ValueError(
            f"a model_type={model_type!r} config without per-layer `rope_parameters` needs "
            "`layer_types`: transformers gives each layer type its own settings"
        )
    return sorted(set(declared))


def _dots3_note(config: dict[str, Any], model_type: str) -> None:
    """dots.llm3: ``swa_rope_theta`` for sliding-window layers, ``rope_theta`` for the rest,
    or one scaling dict for every layer type."""
    swa_theta = {"sliding_attention": config.pop("swa_rope_theta", 50_000.0)}
    theta = config.pop("rope_theta", DEFAULT_ROPE_THETA[model_type])
    params = config.get("rope_parameters")
    if params is None:
        params = config.pop("rope_scaling", None) or {
            name: {"rope_type": "default", "rope_theta": swa_theta.get(name, theta)}
            for name in _layer_kinds(config, model_type)
        }
    if not is_nested(params):
        params = {name: copy.deepcopy(params) for name in _layer_kinds(config, model_type)}
    _setdefault(params, "rope_theta", theta)
    config["rope_parameters"] = params


def _neomme(config: dict[str, Any], model_type: str) -> None:
    """NeoMME: settings per layer type, ``rope_theta`` for all of them when given."""
    theta = config.pop("rope_theta", None)
    params = config["rope_parameters"] = config.get("rope_parameters") or {}
    for name in _layer_kinds(config, model_type):
        default_theta, default_fraction = _NEOMME_DEFAULTS.get(name, (None, None))
        values = params.setdefault(name, {})
        values.setdefault("rope_type", "default")
        values.setdefault("rope_theta", theta if theta is not None else default_theta)
        values.setdefault("partial_rotary_factor", default_fraction)
        for key in ("rope_theta", "partial_rotary_factor"):
            if values[key] is None:
                raise ValueError(
                    f"layer type {name!r} of a model_type='neomme' config has no `{key}` "
                    "and transformers has no default for it; give it in `rope_parameters`"
                )


def _deepseek_v4(config: dict[str, Any], model_type: str) -> None:
    """DeepSeek-V4: settings for its "main" and "compress" layers; the older flat scaling
    (YaRN) applies to the compressed layers only, with ``compress_rope_theta``."""
    theta = config.pop("rope_theta", _TRANSFORMERS_DEFAULT_THETA)
    compress_theta = config.pop("compress_rope_theta", 160_000.0)
    given = config.pop("rope_scaling", None) or config.get("rope_parameters") or {}
    if isinstance(given.get("main"), Mapping) and isinstance(given.get("compress"), Mapping):
        config["rope_parameters"] = {"main": given["main"], "compress": given["compress"]}
        return
    fraction = config.pop("partial_rotary_factor", None)
    if fraction is None:
        # As transformers reads it: qk_rope_head_dim / head_dim (head_dim 512 when absent),
        # or 64 / 512 without qk_rope_head_dim, whatever the head_dim.
        rope_part = config.get("qk_rope_head_dim")
        fraction = 64 / 512 if rope_part is None else rope_part / (config.get("head_dim") or 512)
    scaling = {key: value for key, value in given.items() if key not in ("main", "compress")}
    compress = {**scaling, "rope_theta": compress_theta, "partial_rotary_factor": fraction}
    compress.setdefault("rope_type", compress.pop("type", "default"))
    if compress["rope_type"] == "yarn":
        # The reference does not scale cos and sin by YaRN's attention factor.
        compress.setdefault("attention_factor", 1.0)
    main = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": fraction}
    config["rope_parameters"] = {"main": main, "compress": compress}


def _step3p5(config: dict[str, Any], model_type: str) -> None:
    """Step 3.5/3.7: ``rope_theta`` and ``partial_rotary_factors`` per layer (or one base for
    all), ``rope_scaling`` for the full-attention layers only."""
    theta = config.pop("rope_theta", _TRANSFORMERS_DEFAULT_THETA)
    fractions = config.pop("partial_rotary_factors", None)
    scaling = config.pop("rope_scaling", None)
    given = config.get("rope_parameters") or {}
    _layer_kinds(config, model_type)  # refuses a config without layer_types
    kinds = list(config["layer_types"])
    if all(isinstance(given.get(name), Mapping) for name in kinds):
        config["rope_parameters"] = {name: given[name] for name in kinds}
        return
    thetas = theta if isinstance(theta, list) else [theta] * len(kinds)
    params: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(kinds):
        values = {"rope_type": "default", "rope_theta": thetas[index]}
        if fractions:
            values["partial_rotary_factor"] = fractions[index]
        if params.setdefault(name, values) != values:
            raise ValueError(
                f"the layers of type {name!r} differ in `rope_theta` or "
                "`partial_rotary_factors` in the model config: transformers takes the first "
                "layer's for all of them; anyrope reads one rotation per layer type"
            )
    if scaling and "full_attention" in params:
        params["full_attention"].update(scaling)
    config["rope_parameters"] = params


def _needs_rope_parameters(config: Mapping[str, Any], model_type: str) -> None:
    if not _present(config, "rope_parameters"):
        ignored = [key for key in ("rope_scaling", "rope_theta") if _present(config, key)]
        said = f" (it ignores {', '.join(f'`{key}`' for key in ignored)})" if ignored else ""
        raise ValueError(
            f"a model_type={model_type!r} config without `rope_parameters`: transformers "
            f"reads only that key for this family{said} and gives each layer type its own "
            "built-in settings; give `rope_parameters` per layer type"
        )


def _built_in_scaling(config: Mapping[str, Any], model_type: str) -> None:
    if not (_present(config, "rope_parameters") or _present(config, "rope_scaling")):
        raise ValueError(
            f"a model_type={model_type!r} config without `rope_parameters`: transformers "
            "gives this family its built-in settings, which scale the frequencies; give "
            "`rope_parameters`"
        )


def _built_in_rope_parameters(config: dict[str, Any], model_type: str) -> None:
    if _present(config, "rope_parameters"):
        return
    if _present(config, "rope_scaling"):
        # transformers reads the older keys then, with its own default base, not the family's.
        if not _present(config, "rope_theta"):
            config["rope_theta"] = _TRANSFORMERS_DEFAULT_THETA
    elif _present(config, "rope_theta"):
        raise ValueError(
            f"a model_type={model_type!r} config without `rope_parameters`: transformers "
            "gives this family its built-in settings and ignores `rope_theta`; give it in "
            "`rope_parameters`"
        )
    else:
        # The built-in settings, their base filled in as every family's is: the config
        # then reads the same when it is read again.
        config["rope_parameters"] = {"rope_type": "default"}


def _fixed_rotation(config: Mapping[str, Any], model_type: str) -> None:
    """GPT-J's and CodeGen's attention builds its tables with base 10000 and no scaling,
    whatever the config says: a config that says otherwise is refused."""
    for key in ("rope_theta", "rotary_emb_base"):
        if not _unscaled("rope_theta", config.get(key)):
            raise ValueError(
                f"`{key}`={config[key]!r} in a model_type={model_type!r} config: the family's "
                f"attention rotates with base {_TRANSFORMERS_DEFAULT_THETA} whatever the config "
                "says (transformers ignores the key); drop it to read the rotation it gives"
            )
    for key in ("rope_scaling", "rope_parameters"):
        settings = config.get(key)
        if isinstance(settings, Mapping) and not all(
            _unscaled(name, value) for name, value in settings.items()
        ):
            raise ValueError(
                f"`{key}`={dict(settings)!r} in a model_type={model_type!r} config: the "
                "family's attention rotates without scaling whatever the config says "
                "(transformers ignores the key); drop it to read the rotation it gives"
            )


def _unscaled(name: str, value: Any) -> bool:
    """Whether a key of scaling settings says what unscaled RoPE of base 10000 does."""
    if name in ("rope_type", "type"):
        return value in (None, "default")
    if name == "rope_theta":
        return value in (None, _TRANSFORMERS_DEFAULT_THETA)
    return value is None


def _ignored_rope_scaling(config: Mapping[str, Any], model_type: str) -> None:
    """Cohere2-MoE's config class keeps ``rope_scaling`` as an attribute nothing reads."""
    scaling = config.get("rope_scaling")
    if not isinstance(scaling, Mapping):
        return
    if (scaling.get("rope_type") or scaling.get("type")) not in (None, "default"):
        raise ValueError(
            f"`rope_scaling`={dict(scaling)!r} in a model_type={model_type!r} config: "
            "transformers keeps it unread for this family and rotates without scaling; give "
            "the scaling in `rope_parameters`"
        )


def _derived_layer_types(config: dict[str, Any], model_type: str) -> None:
    """``layer_types`` (and MuseSpark's ``layer_rope_theta``) where a config leaves them
    out, as the family's config class derives them: the layers without RoPE, or with a
    base of their own, depend on them (:data:`anyrope.scaling.hf.SLIDING_ONLY_MODEL_TYPES`)."""
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int):
        return
    if not _present(config, "layer_types"):
        # Full attention every `sliding_window_pattern` layers (Cohere2's older key, which
        # its config class still reads), at layers 0, 4, ... (Granite-SWA), or at the
        # last layer and every fourth before it (MuseSpark).
        pattern = config.get("sliding_window_pattern") or 4
        full = {
            "cohere2": [(i + 1) % pattern == 0 for i in range(layers)],
            "muse_spark_text": [(layers - 1 - i) % 4 == 0 for i in range(layers)],
        }.get(model_type, [i % 4 == 0 for i in range(layers)])
        config["layer_types"] = [
            "full_attention" if is_full else "sliding_attention" for is_full in full
        ]
    if model_type == "muse_spark_text" and not _present(config, "layer_rope_theta"):
        # Every fourth layer from the last has no RoPE (0), whatever `layer_types` says;
        # the family reads only which entries are 0.
        config["layer_rope_theta"] = [int((layers - 1 - i) % 4 != 0) for i in range(layers)]


def _muse_spark_text(config: dict[str, Any], model_type: str) -> None:
    _built_in_rope_parameters(config, model_type)
    _derived_layer_types(config, model_type)


# The function that rewrites an older config of each family in place.
_CONVERTERS: dict[str, Callable[[dict[str, Any], str], None]] = {
    **dict.fromkeys(_TWO_KINDS, _two_kinds),
    **dict.fromkeys(_NEOX_ROTARY_PCT, _gpt_neox),
    **dict.fromkeys(("phi3", "phi4_multimodal"), _phi3),
    **dict.fromkeys(_RETURNS_ONLY_ROPE_PARAMETERS, _needs_rope_parameters),
    **dict.fromkeys(_BUILT_IN_ROPE_PARAMETERS - {"muse_spark_text"}, _built_in_rope_parameters),
    "muse_spark_text": _muse_spark_text,
    **dict.fromkeys(BUILT_IN_SCALING, _built_in_scaling),
    "cohere2_moe": _ignored_rope_scaling,
    **dict.fromkeys(("gptj", "codegen"), _fixed_rotation),
    **dict.fromkeys(("cohere2", "granite_swa", "granitemoe_swa"), _derived_layer_types),
    "minimax_m2": _minimax_m2,
    "hunyuan_vl_text": _hunyuan_vl,
    "dots3_note_text": _dots3_note,
    "neomme": _neomme,
    "deepseek_v4": _deepseek_v4,
    "step3p5": _step3p5,
}


def _fill_default_theta(config: dict[str, Any], model_type: str) -> None:
    """The family's ``rope_theta`` where the config gives none, as transformers fills it."""
    if _present(config, "rope_theta") or _present(config, "rotary_emb_base"):
        return
    scaling = config.get("rope_parameters") or config.get("rope_scaling")
    if isinstance(scaling, dict) and scaling:
        _setdefault(scaling, "rope_theta", DEFAULT_ROPE_THETA[model_type])
    else:
        config["rope_theta"] = DEFAULT_ROPE_THETA[model_type]


def _fill_default_fraction(config: dict[str, Any], model_type: str) -> None:
    """The family's ``partial_rotary_factor`` where the config gives none, as transformers
    fills it (Bamba's whatever the top level says)."""
    default = DEFAULT_PARTIAL_ROTARY_FACTOR[model_type]
    scaling = config.get("rope_parameters") or config.get("rope_scaling")
    if isinstance(scaling, Mapping) and _present(scaling, "partial_rotary_factor"):
        return
    given = config.get("partial_rotary_factor")
    # Bamba's config class sets its default fraction whatever the config's top level says.
    if model_type == "bamba" and given not in (None, default):
        raise ValueError(
            f"`partial_rotary_factor`={given!r} in a model_type={model_type!r} config: "
            f"transformers replaces it by {default!r} for this family; give it in "
            "`rope_parameters` to rotate another fraction"
        )
    if given is None and not _present(config, "rotary_pct"):
        config["partial_rotary_factor"] = default


def _axial_by_default(config: dict[str, Any]) -> None:
    """A vision tower's ``"default"`` (or absent) ``rope_type`` is its ``"axial"``."""
    scaling = config.get("rope_parameters") or config.get("rope_scaling")
    if scaling is None:
        config["rope_parameters"] = {"rope_type": "axial"}
    elif isinstance(scaling, dict) and not is_nested(scaling):
        _rename_method(scaling, ("default",), "axial")
