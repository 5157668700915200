"""Older ``config.json`` formats, against transformers' own reading of the same dict.

Checkpoints on the Hub keep the keys of the release that saved them (Gemma 3's
``rope_local_base_freq``, ModernBERT's ``global_rope_theta``, GPT-NeoX's ``rotary_pct``,
Phi-3's ``"su"``...). For each family's older form, transformers' config class builds
the config from the dict and the family's rotary module computes ``inv_freq`` and the
attention scaling of every layer type; anyrope reads the same dict
(``anyrope.RoPE.from_hf_config_layers``) and must give the same layer types, widths,
frequencies and attention factor, or a clear error where transformers reads the key in
a way no config means. Pinned to transformers 5.23.0 (``nox -s tests-hf``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import math
import pkgutil
import warnings
from typing import Any

import numpy as np
import pytest

import anyrope
import hf_families
from anyrope.scaling import from_hf_config
from anyrope.scaling.hf import from_hf_config_layers

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if (unpinned := hf_families.unpinned_reason(transformers.__version__)) is not None:
    pytest.skip(
        f"older formats are read as one release reads them: {unpinned}", allow_module_level=True
    )

RTOL = 1e-6
"""transformers computes the frequencies in float32, anyrope in float64."""

GEMMA_3_TEXT = {
    # google/gemma-3-4b-it's text_config as saved by transformers 4.50.
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "num_hidden_layers": 34,
    "max_position_embeddings": 131072,
    "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "rope_theta": 1000000.0,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
}

MODERNBERT = {
    # answerdotai/ModernBERT-base as saved by transformers 4.48.
    "model_type": "modernbert",
    "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0,
    "hidden_size": 768,
    "local_attention": 128,
    "local_rope_theta": 10000.0,
    "max_position_embeddings": 8192,
    "num_attention_heads": 12,
    "num_hidden_layers": 22,
}

LONGROPE_FACTORS = {"short_factor": [1.0 + 0.01 * i for i in range(48)]} | {
    "long_factor": [1.0 + 0.25 * i for i in range(48)]
}
PHI_3 = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
}

OLDER = {
    "gemma3_text": GEMMA_3_TEXT,
    "gemma3_text-unscaled": {**GEMMA_3_TEXT, "rope_scaling": None, "rope_theta": 2e6},
    "gemma3_text-no-local-base": {
        key: value for key, value in GEMMA_3_TEXT.items() if key != "rope_local_base_freq"
    },
    "gemma3n_text": {
        "model_type": "gemma3n_text",
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 20000.0,
    },
    "t5gemma2_text": {
        "model_type": "t5gemma2_text",
        "rope_theta": 500000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    "modernbert": MODERNBERT,
    "modernbert-other-bases": {
        **MODERNBERT,
        "global_rope_theta": 80000.0,
        "local_rope_theta": 20000.0,
    },
    "modernbert-scaled": {**MODERNBERT, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "modernbert-decoder": {
        **MODERNBERT,
        "model_type": "modernbert-decoder",
        "global_rope_theta": 320000.0,
    },
    "olmo3-yarn": {
        "model_type": "olmo3",
        "rope_theta": 500000.0,
        "max_position_embeddings": 65536,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 8.0,
            "original_max_position_embeddings": 8192,
            "attention_factor": 1.2079441541679836,
        },
    },
    "gpt_neox": {
        "model_type": "gpt_neox",
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "rotary_pct": 0.5,
        "rotary_emb_base": 20000,
    },
    "gpt_neox-default-pct": {
        "model_type": "gpt_neox",
        "hidden_size": 512,
        "num_attention_heads": 8,
    },
    "gpt_neox_japanese-default-pct": {
        "model_type": "gpt_neox_japanese",
        "hidden_size": 512,
        "num_attention_heads": 8,
    },
    "gpt_neox-type-key": {
        "model_type": "gpt_neox",
        "hidden_size": 512,
        "num_attention_heads": 8,
        "rotary_pct": 1.0,
        "rope_scaling": {"type": "linear", "factor": 3.0},
    },
    # transformers moves a top-level original_max_position_embeddings into "longrope"
    # settings only, so that an "su" config must carry it inside.
    "phi3-su": {
        **PHI_3,
        "rope_scaling": {
            "type": "su",
            "original_max_position_embeddings": 4096,
            **LONGROPE_FACTORS,
        },
    },
    "phi3-yarn-name": {**PHI_3, "rope_scaling": {"type": "yarn", **LONGROPE_FACTORS}},
    # Without a top-level original_max_position_embeddings the config class holds 4096,
    # which transformers reads in place of max_position_embeddings (or the inner one).
    "phi3-no-original-length": {
        **{key: value for key, value in PHI_3.items() if key != "original_max_position_embeddings"},
        "rope_scaling": {"type": "longrope", **LONGROPE_FACTORS},
    },
    "phi4_multimodal-inner-original-length-4096": {
        **{key: value for key, value in PHI_3.items() if key != "original_max_position_embeddings"},
        "model_type": "phi4_multimodal",
        "rope_scaling": {
            "rope_type": "longrope",
            "original_max_position_embeddings": 4096,
            **LONGROPE_FACTORS,
        },
    },
    "phi4_multimodal-su": {
        **PHI_3,
        "model_type": "phi4_multimodal",
        "rope_scaling": {
            "rope_type": "su",
            "original_max_position_embeddings": 4096,
            **LONGROPE_FACTORS,
        },
    },
    "minimax_m2-rotary-dim": {
        "model_type": "minimax_m2",
        "head_dim": 128,
        "rotary_dim": 64,
        "rope_theta": 5000000,
    },
    "hunyuan_vl_text-xdrope": {
        "model_type": "hunyuan_vl_text",
        "head_dim": 128,
        "rope_scaling": {"type": "xdrope", "factor": 2.0},
    },
    "dots3_note_text-swa": {
        "model_type": "dots3_note_text",
        "rope_theta": 1000000.0,
        "swa_rope_theta": 20000.0,
    },
    "dots3_note_text-scaled": {
        "model_type": "dots3_note_text",
        "rope_theta": 1000000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
        },
    },
    "deepseek_v4-flat-yarn": {
        "model_type": "deepseek_v4",
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "max_position_embeddings": 1048576,
        "rope_scaling": {
            "type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 65536,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    },
    "step3p5-per-layer-lists": {
        "model_type": "step3p5",
        "num_hidden_layers": 4,
        "layer_types": [
            "full_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention",
        ],
        "rope_theta": [5000000.0, 10000.0, 10000.0, 5000000.0],
        "partial_rotary_factors": [0.5, 1.0, 1.0, 0.5],
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    "neomme-one-theta": {"model_type": "neomme", "rope_theta": 500000.0},
    "neomme-defaults": {"model_type": "neomme"},
    "llama-type-key": {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    },
    "qwen2_vl_text-mrope": {
        "model_type": "qwen2_vl_text",
        "hidden_size": 1536,
        "num_attention_heads": 12,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    },
    "mixtral-no-theta": {"model_type": "mixtral"},
    "cohere-no-theta": {"model_type": "cohere"},
    "bailing_hybrid-no-theta": {"model_type": "bailing_hybrid"},
    "qwen2_vl_text-no-theta": {"model_type": "qwen2_vl_text"},
}
"""Older forms, by family: each is built by the family's transformers config class."""


_WIDTH_KEYS = (
    "head_dim",
    "qk_rope_head_dim",
    "hidden_size",
    "num_attention_heads",
    "max_position_embeddings",
)


def _with_widths(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the widths and layer types of the family's default config where it
    gives none: the frequencies compared here are those of the older RoPE keys."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = transformers.AutoConfig.for_model(config["model_type"])
    default.allow_global_per_layer_attribute_access = True
    keys = _WIDTH_KEYS if "num_hidden_layers" in config else (*_WIDTH_KEYS, "layer_types")
    widths = {key: getattr(default, key, None) for key in keys}
    return {key: value for key, value in widths.items() if value is not None} | config


def _transformers_layers(config: dict[str, Any]) -> dict[str, tuple[Any, float, int]]:
    """Layer type -> (inv_freq, attention scaling, head width) from the family's rotary
    module, built by its transformers config class from ``config``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
        family = type(hf).__module__.split(".")[-2]
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        rotary_class, text = hf_families._rotary_and_config(module, hf)
        rotary = rotary_class(config=text)
    width = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    parameters = text.rope_parameters
    nested = text.nested_rope_parameter_keys(parameters)
    if not nested:
        return {"": (rotary.inv_freq, rotary.attention_scaling, width)}
    return {
        name: (
            getattr(rotary, f"{name}_inv_freq"),
            getattr(rotary, f"{name}_attention_scaling"),
            width,
        )
        for name in nested
        if parameters[name] is not None
    }


@pytest.mark.parametrize("name", sorted(OLDER))
def test_older_config_reads_as_transformers_reads_it(name: str) -> None:
    config = _with_widths(OLDER[name])
    theirs = _transformers_layers(config)
    ours = from_hf_config_layers(config)
    if "" in theirs:
        assert len(set(ours.values())) == 1, ours
        ours = {"": next(iter(ours.values()))}
    assert sorted(ours) == sorted(theirs)
    for layer_type, (inv_freq, attention_scaling, width) in theirs.items():
        settings = ours[layer_type]
        assert settings is not None, layer_type
        if "qk_rope_head_dim" not in config:  # else anyrope's head is the rotated part
            assert settings.head_dim == width, layer_type
        frequencies, factor = settings.scaling.frequencies(settings.rotary_dim, settings.base)
        assert frequencies.shape == tuple(inv_freq.shape), layer_type
        np.testing.assert_allclose(
            frequencies, inv_freq.double().numpy(), rtol=RTOL, atol=0, err_msg=layer_type
        )
        assert math.isclose(factor, float(attention_scaling), rel_tol=1e-12), layer_type


def test_gemma_3_sliding_layers_get_the_local_base_unscaled() -> None:
    """The case of the issue, said plainly: base 10000 and no scaling on sliding layers."""
    layers = anyrope.RoPE.from_hf_config_layers(GEMMA_3_TEXT)
    assert (layers["sliding_attention"].base, layers["sliding_attention"].scaling.rope_type) == (
        10000.0,
        "default",
    )
    full = layers["full_attention"]
    assert (full.base, full.scaling.rope_type, full.scaling.factor) == (1e6, "linear", 8.0)
    sliding = anyrope.RoPE.from_hf_config(GEMMA_3_TEXT, layer_type="sliding_attention")
    assert sliding.base == 10000.0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {**GEMMA_3_TEXT, "rope_scaling": {"type": "linear", "factor": 8.0}},
            "its older `type` key is ignored",
        ),
        (
            {**GEMMA_3_TEXT, "rope_scaling": None, "rope_parameters": {"rope_type": "linear"}},
            "gives RoPE settings per layer type",
        ),
        ({"model_type": "olmo3", "rope_theta": 1e6}, "default 500000 to the sliding-window"),
        (
            {
                "model_type": "gpt_neox",
                "hidden_size": 512,
                "num_attention_heads": 8,
                "rope_theta": 5.0,
            },
            "transformers ignores this key for the family and reads `rotary_emb_base`",
        ),
        (
            {
                "model_type": "gpt_neox",
                "hidden_size": 512,
                "num_attention_heads": 8,
                "partial_rotary_factor": 0.5,
            },
            "reads `rotary_pct` (here 0.25)",
        ),
        ({"model_type": "mimo_v2_flash", "rope_theta": 1e6}, "it ignores `rope_theta`"),
        *(
            (
                {"model_type": model_type, "head_dim": 128, "rope_theta": 54321.0},
                "ignores `rope_theta`",
            )
            for model_type in (
                "moonshine_streaming",
                "muse_spark_text",
                "nemotron3_5_transcribe_asr_audio",
            )
        ),
        (
            {
                "model_type": "hunyuan_vl_text",
                "head_dim": 128,
                "rope_scaling": {
                    "type": "xdrope",
                    "factor": 2.0,
                    "xdrope_section": [16, 16, 16, 16],
                },
            },
            "lays out its M-RoPE streams in its own way",
        ),
        (
            {
                "model_type": "cohere2_moe",
                "head_dim": 128,
                "rope_scaling": {"type": "linear", "factor": 4.0},
            },
            "transformers keeps it unread for this family",
        ),
        ({"model_type": "laguna"}, "reads only that key for this family"),
        (
            {
                "model_type": "minimax_m2",
                "hidden_size": 3072,
                "num_attention_heads": 48,
                "rotary_dim": 64,
            },
            "needs `head_dim`: transformers reads it as the fraction",
        ),
        ({"model_type": "dots3_note_text", "rope_theta": 1e6}, "needs `layer_types`"),
        (
            {"model_type": "gptj", "n_embd": 512, "n_head": 2, "rope_theta": 5e4},
            "`rope_theta`=50000.0 in a model_type='gptj' config: the family's attention",
        ),
        (
            {
                "model_type": "codegen",
                "n_embd": 512,
                "n_head": 2,
                "rope_scaling": {"type": "linear", "factor": 4.0},
            },
            "rotates without scaling whatever the config says",
        ),
        (
            {
                **{k: v for k, v in PHI_3.items() if k != "original_max_position_embeddings"},
                "rope_parameters": {
                    "rope_type": "longrope",
                    "rope_theta": 10000.0,
                    "original_max_position_embeddings": 8192,
                    **LONGROPE_FACTORS,
                },
            },
            "reads the config class's top-level default, 4096, instead",
        ),
        (
            {
                "model_type": "step3p5",
                "head_dim": 128,
                "num_hidden_layers": 2,
                "layer_types": ["full_attention", "full_attention"],
                "rope_theta": [1e6, 1e4],
            },
            "the layers of type 'full_attention' differ in `rope_theta`",
        ),
    ],
)
def test_older_forms_transformers_misreads_are_refused(
    config: dict[str, Any], message: str
) -> None:
    """Where transformers drops the key or replaces it by its default, anyrope says so."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_hf_config_layers(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    assert hf is not None  # transformers itself reads it without a word


def _effective_default_theta(config_class: type) -> tuple[float | None, bool]:
    """The ``rope_theta`` transformers gives a config of this class that has none, and
    whether a config without any RoPE key gets settings that scale the frequencies.

    The base is what a default instance holds (a ``__post_init__`` may set it, as
    MuseSpark's does), else the class's declared default, which is also what a config
    of a family that scales by default gets with its own ``rope_scaling``.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = config_class().rope_parameters
    except Exception:
        built = None
    scaled = False
    if isinstance(built, dict) and isinstance(built.get("rope_theta"), (int, float)):
        scaled = built.get("rope_type", "default") not in ("default", "axial")
        if not scaled:
            return float(built["rope_theta"]), scaled
    fields = (
        {field.name: field for field in dataclasses.fields(config_class)}
        if dataclasses.is_dataclass(config_class)
        else {}
    )
    if "rope_theta" in fields and fields["rope_theta"].default is not dataclasses.MISSING:
        return float(fields["rope_theta"].default), scaled
    theta = getattr(config_class, "default_theta", None)
    return (float(theta) if isinstance(theta, (int, float)) else None), scaled


@pytest.mark.parametrize("model_type", ["gemma3_text", "modernbert", "olmo3"])
def test_a_type_only_rope_scaling_of_a_two_kinds_family_is_refused(model_type: str) -> None:
    """These families read ``rope_scaling`` into settings that already say ``"default"``:
    transformers keeps that and drops an older ``type``, so the layers are not scaled."""
    scaling = {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}
    config = {"model_type": model_type, "head_dim": 64, "rope_scaling": scaling}
    with pytest.raises(ValueError, match=r"its older `type` key is ignored"):
        from_hf_config_layers(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    assert hf.rope_parameters["full_attention"]["rope_type"] == "default"


def test_default_rope_theta_of_every_family() -> None:
    """A config without ``rope_theta`` gets the family's default, as in transformers
    (families with a default per layer type are read by their own rules above)."""
    import transformers.models

    from anyrope.scaling._hf_older import BUILT_IN_SCALING, DEFAULT_ROPE_THETA

    defaults: dict[str, float] = {}
    scaled: set[str] = set()
    for info in pkgutil.iter_modules(transformers.models.__path__):
        try:
            module = importlib.import_module(
                f"transformers.models.{info.name}.configuration_{info.name}"
            )
        except ImportError:
            continue
        for _, config_class in inspect.getmembers(module, inspect.isclass):
            model_type = getattr(config_class, "model_type", "")
            if model_type and issubclass(config_class, transformers.PreTrainedConfig):
                theta, scales = _effective_default_theta(config_class)
                if theta is not None and theta != 10000.0:
                    defaults[model_type] = theta
                if scales:
                    scaled.add(model_type)
    assert defaults == DEFAULT_ROPE_THETA
    assert scaled == BUILT_IN_SCALING
    for model_type in sorted(scaled):
        with pytest.raises(ValueError, match=r"built-in settings, which scale the frequencies"):
            from_hf_config({"model_type": model_type, "head_dim": 64})


@pytest.mark.parametrize("model_type", ["mixtral", "cohere", "smollm3", "bailing_hybrid"])
def test_a_config_without_rope_theta_gets_the_family_default(model_type: str) -> None:
    config = {"model_type": model_type, "hidden_size": 1024, "num_attention_heads": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    assert from_hf_config(config).base == hf.rope_parameters["rope_theta"]


def _default_fractions() -> dict[str, float]:
    """The rotated fraction transformers gives each family's default config, where it is
    not the whole head (flat settings only)."""
    import logging

    import transformers.models

    found: dict[str, float] = {}
    logging.disable(logging.CRITICAL)
    try:
        for info in pkgutil.iter_modules(transformers.models.__path__):
            try:
                module = importlib.import_module(
                    f"transformers.models.{info.name}.configuration_{info.name}"
                )
            except ImportError:
                continue
            for _, config_class in inspect.getmembers(module, inspect.isclass):
                model_type = getattr(config_class, "model_type", "")
                if not (
                    model_type
                    and config_class.__module__ == module.__name__
                    and issubclass(config_class, transformers.PreTrainedConfig)
                ):
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        parameters = config_class().rope_parameters
                except Exception:  # a default config that does not build
                    continue
                if not isinstance(parameters, dict) or any(
                    isinstance(value, dict) for value in parameters.values()
                ):
                    continue
                fraction = parameters.get("partial_rotary_factor")
                if fraction is not None and fraction != 1.0:
                    found[model_type] = fraction
    finally:
        logging.disable(logging.NOTSET)
    return found


def test_default_partial_rotary_factor_of_every_family() -> None:
    """A config without ``partial_rotary_factor`` gets the family's default, as in
    transformers; GPT-NeoX's (its ``rotary_pct``) and Mistral 4's (``qk_rope_head_dim /
    head_dim``) follow from their own keys."""
    from anyrope.scaling._hf_older import DEFAULT_PARTIAL_ROTARY_FACTOR

    found = _default_fractions()
    assert found.pop("gpt_neox") == 0.25
    assert found.pop("mistral4") == 0.5
    assert found == DEFAULT_PARTIAL_ROTARY_FACTOR


@pytest.mark.parametrize(
    "model_type", ["phi", "persimmon", "stablelm", "glm4", "qwen3_next", "nemotron", "bamba"]
)
def test_a_config_without_a_fraction_gets_the_family_default(model_type: str) -> None:
    config = {"model_type": model_type, "hidden_size": 1024, "num_attention_heads": 8}
    if model_type == "qwen3_next":
        config["head_dim"] = 128
    theirs = _transformers_layers(config)[""][0]
    settings = from_hf_config(config)
    assert settings.rotary_dim == 2 * theirs.shape[0]
    ours, _ = settings.scaling.frequencies(settings.rotary_dim, settings.base)
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=RTOL, atol=0)


def test_bamba_fraction_is_fixed_by_transformers() -> None:
    config = {
        "model_type": "bamba",
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "partial_rotary_factor": 1.0,
    }
    with pytest.raises(ValueError, match=r"transformers replaces it by 0.5 for this family"):
        from_hf_config(config)


def test_vision_towers_are_axial_by_default() -> None:
    """Every family whose transformers config reads ``"default"`` as ``"axial"``."""
    import transformers.models

    from anyrope.scaling._hf_older import AXIAL_MODEL_TYPES

    axial = set()
    for info in pkgutil.iter_modules(transformers.models.__path__):
        try:
            module = importlib.import_module(
                f"transformers.models.{info.name}.configuration_{info.name}"
            )
        except ImportError:
            continue
        for _, config_class in inspect.getmembers(module, inspect.isclass):
            model_type = getattr(config_class, "model_type", "")
            if (
                model_type
                and issubclass(config_class, transformers.PreTrainedConfig)
                and getattr(config_class, "default_rope_type", "default") != "default"
            ):
                assert config_class.default_rope_type == "axial"
                axial.add(model_type)
    assert axial == AXIAL_MODEL_TYPES


@pytest.mark.parametrize("rope", [{}, {"rope_scaling": {"type": "default"}}])
def test_an_older_vision_config_reads_as_its_transformers_config(rope: dict[str, Any]) -> None:
    """Qwen2-VL's vision tower saved without ``rope_parameters``: axial, as transformers
    reads it (``test_transformers_parity`` checks the object's tables against its code)."""
    older = transformers.Qwen2VLConfig().vision_config.to_dict()
    del older["rope_parameters"]
    # The tower's config.json says num_heads; the attribute anyrope reads is transformers'.
    older |= rope | {"num_attention_heads": older["num_heads"]}
    vision_config = type(transformers.Qwen2VLConfig().vision_config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = vision_config(**copy.deepcopy(older))
        # transformers leaves an older `type` next to the `rope_type` it sets: the
        # reference reads the tower saved without one.
        saved = vision_config(
            **{key: value for key, value in older.items() if key != "rope_scaling"}
        )
    assert theirs.rope_parameters["rope_type"] == "axial"
    ours = anyrope.RoPE.from_hf_config(older)
    reference = anyrope.RoPE.from_hf_config(saved)
    assert ours.axial
    assert reference.axial
    assert (ours.head_dim, ours.rotary_dim, ours.base) == (
        reference.head_dim,
        reference.rotary_dim,
        reference.base,
    )
    positions = np.stack(np.meshgrid(np.arange(5), np.arange(7), indexing="ij"), -1)
    positions = positions.reshape(-1, 2)
    for mine, its in zip(
        ours.tables(positions, dtype=np.float64),
        reference.tables(positions, dtype=np.float64),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, its)


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "cohere2", "sliding_window": 4096, "sliding_window_pattern": 3},
        {"model_type": "cohere2", "sliding_window": 4096},
        {"model_type": "granite_swa", "layer_rope_theta": [0, 1e6, 1e6, 1e6] * 2},
        {"model_type": "muse_spark_text"},
    ],
    ids=["cohere2-pattern", "cohere2-default-pattern", "granite_swa", "muse_spark_text"],
)
def test_layers_without_rope_in_a_config_without_layer_types(config: dict[str, Any]) -> None:
    """The layer types (and MuseSpark's layers without RoPE) that the family's config
    class derives, where the config.json leaves them out."""
    config = {**config, "head_dim": 16, "num_hidden_layers": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    ours = {kind: rope and rope.base for kind, rope in from_hf_config_layers(config).items()}
    theirs = {kind: rope and rope.base for kind, rope in from_hf_config_layers(hf).items()}
    assert ours == theirs
    assert list(ours.values()).count(None) == 1  # the full-attention layers
    assert config.get("layer_types", hf.layer_types) == hf.layer_types


def test_a_sliding_only_family_needs_its_layer_types_per_layer_type() -> None:
    """Which layers rotate needs ``layer_types``; the rotation of those that do does not."""
    config = {"model_type": "exaone4", "head_dim": 16, "sliding_window": 8}
    with pytest.raises(ValueError, match=r"needs `layer_types`: the family rotates its sliding"):
        from_hf_config_layers(config)
    assert from_hf_config(config).base == 10000.0
