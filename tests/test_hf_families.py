"""Every transformers family with a rotary class: anyrope matches it or says why not.

Pinned to transformers 5.23.0 (``nox -s tests-hf``). For each modeling file that defines
a ``*RotaryEmbedding`` class, ``hf_families.drive`` builds the family's default config,
rotates q and k with the family's own rotary module and apply function, and with
``anyrope.RoPE.from_hf_config(config)`` (per layer type where the config nests its
settings). A silent mismatch fails; a clear error is allowed where listed below, with
what it says; families the generic driver cannot run are listed with the reason.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest

import anyrope
import hf_families
from anyrope.scaling.hf import layer_types

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if (unpinned := hf_families.unpinned_reason(transformers.__version__)) is not None:
    pytest.skip(f"the family lists are for one release: {unpinned}", allow_module_level=True)

NOT_DRIVEN = {
    "cohere_compass": "KeyError: 'full_attention'",
    "deepseek_v2": "RuntimeError",  # complex tables of another shape than Llama 4's
    "edgetam_video": "LookupError: no text rotary class",
    "eomt_dinov3": "TypeError",
    "exaone4_5": "a vision tower's 2-D axial RoPE",
    "glm5_next": "a vision tower's 2-D axial RoPE",
    "higgs_audio_v2": "LookupError: no text rotary class",
    "hunyuan_vl": "TypeError",
    "inkling2": "a vision tower's 2-D axial RoPE",
    "kimi_k25": "a vision tower's 2-D axial RoPE",
    "laguna[sliding_attention]": "KeyError: 'sliding_attention'",
    "lfm3_vl": "a vision tower's 2-D axial RoPE",
    "mellum[sliding_attention]": "KeyError: 'sliding_attention'",
    "mlcd": "a vision tower's 2-D axial RoPE",
    "musicflamingo": "AttributeError",
    "pixtral": "LookupError: no text rotary class",
    "pocket_tts_audio_tokenizer": "LookupError: no text rotary class",
    "sam2_video": "LookupError: no text rotary class",
    "sam3": "AttributeError",
    "sam3_tracker_video": "LookupError: no text rotary class",
    "video_llama_3": "a vision tower's 2-D axial RoPE",
    "zaya[hybrid_sliding]": "KeyError: 'hybrid_sliding'",
}
"""Driven by hand elsewhere or not at all: ``family[layer type]`` -> the start of the
reason. Most are vision towers (2-D positions), audio codecs without a text rotary
class, or configs whose default values do not build their own model."""

CLEAR_ERRORS = {
    "blt": "needs `head_dim`, or `hidden_size` and `num_attention_heads`",
    "deepseek_v4[compress]": "`rope_theta`=10000.0 and `rope_parameters['rope_theta']`",
    "efficientloftr": "`partial_rotary_factor` must be in (0, 1]",
    "ernie4_5_vl_moe": "lays out its M-RoPE streams in its own way",
    "glm4v": "without `mrope_section`: the family's code splits its 64 rotated pairs",
    "glm_image": "without `mrope_section`: the family's code splits its 64 rotated pairs",
    "esmfold2": "needs `head_dim`, or `hidden_size` and `num_attention_heads`",
    "glm4_moe": "is not a multiple of `num_attention_heads`",
    "glm4v_moe": "is not a multiple of `num_attention_heads`",
    "lasr": "needs `head_dim`, or `hidden_size` and `num_attention_heads`",
    "ministral3": "llama_4_scaling_beta']`=0.1 is Llama 4's attention temperature",
    "mistral4": "llama_4_scaling_beta']`=0.1 is Llama 4's attention temperature",
    "nanochat": "rotates by the negative angle",
    "nemotron3_diarization": "needs `head_dim`, or `hidden_size` and `num_attention_heads`",
    "qwen3_omni_moe": "is not a multiple of `num_attention_heads`",
}
"""Configs anyrope refuses, by what the error says: a key it does not model (Llama 4's
attention temperature, which scales the queries in attention), a width the default config leaves
ambiguous, or a rotation it does not give (NanoChat's negative angle). M-RoPE families
are driven with a different position in each stream."""

FAMILIES = hf_families.rotary_families()


def test_the_sweep_covers_every_rotary_family():
    assert len(FAMILIES) == 193


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_or_says_why(family: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcomes = hf_families.drive(family)
    for outcome in outcomes:
        label = outcome.family
        if label in NOT_DRIVEN:
            assert outcome.kind == "not driven", outcome
            assert outcome.detail.startswith(NOT_DRIVEN[label]), outcome
        elif label in CLEAR_ERRORS:
            assert outcome.kind == "anyrope error", outcome
            assert CLEAR_ERRORS[label] in outcome.detail, outcome
        else:
            assert outcome.kind == "match", outcome


INTERLEAVED_MROPE_FAMILIES = [
    "cosmos3_edge",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_omni_moe",
    "qwen3_vl",
    "qwen3_vl_moe",
    "qwen4_exp",
]
"""Families whose M-RoPE gives the streams' pairs in turn (``recomposition_frequencies``
of Qwen3-VL); Cohere Compass shares it, but its default config does not build."""


@pytest.mark.parametrize("family", INTERLEAVED_MROPE_FAMILIES)
def test_interleaved_mrope_matches_with_three_distinct_streams(family: str) -> None:
    """Their default text configs have no ``mrope_section`` (plain RoPE); a released
    config.json has one, with ``mrope_interleaved``: give it the sections the family's
    rotary class falls back to, and rotate positions that differ in every stream."""
    import importlib

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rotary_class, config = hf_families._rotary_and_config(module, hf_families._config(family))
        if family == "qwen3_omni_moe":
            # The driver's class is the talker's plain one; the thinker's text is M-RoPE.
            rotary_class = module.Qwen3OmniMoeThinkerTextRotaryEmbedding
            config.head_dim = 128  # 2048 over 28 heads does not divide
        sections = list(rotary_class(config=config).mrope_section)
        pairs = int(config.head_dim * config.rope_parameters.get("partial_rotary_factor", 1)) // 2
        if sum(sections) != pairs:
            # Qwen4-Exp's fallback [11, 11, 10] is for a quarter of its 256 features.
            sections = [pairs - 2 * (pairs * 5 // 16), pairs * 5 // 16, pairs * 5 // 16]
        config.rope_parameters = {
            **config.rope_parameters,
            "mrope_section": sections,
            "mrope_interleaved": True,
        }
        outcome = hf_families._drive_one(family, module, rotary_class, config, None)
    rope = anyrope.RoPE.from_hf_config(config)
    assert rope.scaling.mrope_interleaved
    assert rope.sections == tuple(sections)
    assert outcome.kind == "match", outcome


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize(
    "family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "cosmos3_edge"]
)
def test_m_rope_without_sections_takes_the_fallback_of_the_family_code(
    family: str, head_dim: int
) -> None:
    """A config without ``mrope_section`` still rotates by three streams in these families:
    the sections their code falls back to, cut to the pairs there are in Qwen3-VL's
    interleaved layout. Driven with a different position in each stream."""
    import importlib

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rotary_class, config = hf_families._rotary_and_config(module, hf_families._config(family))
        config.head_dim = head_dim
        config.rope_parameters = {
            k: v for k, v in config.rope_parameters.items() if k != "mrope_section"
        }
        fallback = list(rotary_class(config=config).mrope_section)
        pairs = int(head_dim * config.rope_parameters.get("partial_rotary_factor", 1)) // 2
        if family in INTERLEAVED_MROPE_FAMILIES or sum(fallback) == pairs:
            outcome = hf_families._drive_one(family, module, rotary_class, config, None)
            assert outcome.kind == "match", outcome
            assert anyrope.RoPE.from_hf_config(config).sections is not None
        else:
            with pytest.raises(ValueError, match=r"without `mrope_section`: the family's code"):
                anyrope.RoPE.from_hf_config(config)


@pytest.mark.parametrize("family", ["gptj", "codegen"])
def test_gptj_and_codegen_rotate_their_rotary_dim_interleaved(family: str) -> None:
    """No rotary class to drive: their attention gathers sin/cos rows of
    ``create_sinusoidal_positions`` and rotates the first ``rotary_dim`` features with
    ``rotate_every_two``; anyrope reads ``rotary_dim`` and the family's pairing."""
    import importlib

    import torch

    import anyrope

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    config = hf_families._config(family)
    rope = anyrope.RoPE.from_hf_config(config)
    width = config.rotary_dim
    assert (rope.head_dim, rope.rotary_dim, rope.interleaved) == (256, width, True)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 48, 2, rope.head_dim, generator=generator)
    positions = torch.arange(1000, 1048)[None]
    sin, cos = torch.split(
        module.create_sinusoidal_positions(2048, width)[positions], width // 2, -1
    )
    rotated = module.apply_rotary_pos_emb(q[..., :width], sin, cos)
    theirs = torch.cat((rotated, q[..., width:]), dim=-1)
    ours = rope.rotate(q, positions, impl="array_api")
    assert float((theirs - ours).abs().max()) <= 2e-3


GLM_M_ROPE = {
    "glm4v": ("Glm4vTextConfig", "Glm4vTextRotaryEmbedding", {}),
    "glm_ocr": ("GlmOcrTextConfig", "GlmOcrTextRotaryEmbedding", {}),
    "glm_image": ("GlmImageTextConfig", "GlmImageTextRotaryEmbedding", {}),
    "glm4v_moe": ("Glm4vMoeTextConfig", "Glm4vMoeTextRotaryEmbedding", {"head_dim": 128}),
}
"""GLM's vision-language text models: M-RoPE of contiguous sections of pairs over half
of a 128-feature head. GLM-4.1V and GLM-OCR pair ``(x[2i], x[2i+1])``
(``rotate_half_llm``), GLM-4.5V and GLM-Image pair halves. Their default configs give
sections wider than the rotated width, so they are driven with a released layout."""


@pytest.mark.parametrize("family", sorted(GLM_M_ROPE))
def test_glm_m_rope_matches_with_three_distinct_streams(family: str) -> None:
    import importlib

    config_class, rotary_name, extra = GLM_M_ROPE[family]
    configs = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    scaling = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "mrope_section": [8, 12, 12],
        "partial_rotary_factor": 0.5,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(configs, config_class)(
            hidden_size=512,
            num_attention_heads=4,
            num_key_value_heads=2,
            partial_rotary_factor=0.5,
            rope_parameters=scaling,
            **extra,
        )
        outcome = hf_families._drive_one(family, module, getattr(module, rotary_name), config, None)
    assert outcome.kind == "match", outcome
    settings = anyrope.scaling.from_hf_config(config.to_dict())
    assert settings.scaling.mrope_section == (8, 12, 12)
    assert settings.interleaved == (family in ("glm4v", "glm_ocr"))


SLIDING_ONLY = {
    "cohere2": ("Cohere2Config", "Cohere2Attention", {}),
    "cohere2_moe": ("Cohere2MoeConfig", "Cohere2MoeAttention", {}),
    "exaone4": ("Exaone4Config", "Exaone4Attention", {}),
    "kolibri1": ("Kolibri1Config", "Kolibri1Attention", {}),
}
"""Families whose attention decides, layer by layer, whether it rotates at all."""


def _attention_rotates(module: Any, attention_name: str, config: Any, index: int) -> bool:
    """Whether layer ``index``'s own attention changes its output when the tables do."""
    import torch

    attention = getattr(module, attention_name)(config, layer_idx=index).eval()
    generator = torch.Generator().manual_seed(index)
    hidden = torch.randn(1, 5, config.hidden_size, generator=generator)
    width = config.head_dim
    angles = torch.randn(1, 5, width, generator=generator)
    outputs = [
        attention(hidden, tables, None)[0]
        for tables in (
            (torch.ones(1, 5, width), torch.zeros(1, 5, width)),
            (angles.cos(), angles.sin()),
        )
    ]
    return not torch.equal(*outputs)


@pytest.mark.parametrize(
    ("family", "dense_prefix"),
    [*((family, 0) for family in sorted(SLIDING_ONLY)), ("cohere2_moe", 2)],
    ids=[*sorted(SLIDING_ONLY), "cohere2_moe-dense-prefix"],
)
def test_layers_whose_attention_does_not_rotate_have_no_rope(
    family: str, dense_prefix: int
) -> None:
    """Cohere2's and Command A's full-attention layers rotate nothing (their attention
    skips the rotation): ``from_hf_config_layers`` gives ``None`` for them, and
    ``layer_type=`` that type is an error. Cohere2-MoE's dense prefix layers, full
    attention too, do rotate: that layer type then has two rotations, an error."""
    import importlib

    import torch

    config_name, attention_name, extra = SLIDING_ONLY[family]
    configs = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    sizes = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    if dense_prefix:
        extra = {**extra, "first_k_dense_replace": dense_prefix}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(configs, config_name)(num_hidden_layers=8, **sizes, **extra)
        config.head_dim = 16
        config._attn_implementation = "eager"
        with torch.no_grad():
            rotates = [_attention_rotates(module, attention_name, config, i) for i in range(8)]
    by_type: dict[str, set[bool]] = {}
    for kind, rotated in zip(config.layer_types, rotates, strict=True):
        by_type.setdefault(kind, set()).add(rotated)
    assert {True, False} <= set().union(*by_type.values())  # the case is there
    for source in (config, config.to_dict()):
        mixed = [kind for kind, seen in by_type.items() if len(seen) > 1]
        if mixed:
            with pytest.raises(
                ValueError, match=r"rotates its 'full_attention' layers in different"
            ):
                anyrope.RoPE.from_hf_config_layers(source)
            continue
        ropes = anyrope.RoPE.from_hf_config_layers(source)
        for kind, seen in by_type.items():
            assert (ropes[kind] is not None) == next(iter(seen)), kind
            if ropes[kind] is None:
                with pytest.raises(ValueError, match=r"does not rotate its 'full_attention'"):
                    anyrope.RoPE.from_hf_config(source, layer_type=kind)
        # Without a layer type: the rotation of the layers that rotate.
        assert repr(anyrope.RoPE.from_hf_config(source)) == repr(ropes["sliding_attention"])


NO_ROPE_LAYERS = {
    "llama4": ("Llama4TextConfig", "Llama4TextAttention"),
    "mistral_large4": ("MistralLarge4TextConfig", "MistralLarge4TextAttention"),
    "smollm3": ("SmolLM3Config", "SmolLM3Attention"),
}
"""Families whose attention rotates layer ``i`` only where ``no_rope_layers[i]`` is 1."""


@pytest.mark.parametrize("derived", [False, True], ids=["listed", "derived"])
@pytest.mark.parametrize("family", sorted(NO_ROPE_LAYERS))
def test_no_rope_layers_have_no_rope(family: str, derived: bool) -> None:
    """Each layer's own attention module says whether it rotates (``use_rope``); a type
    whose layers never do gets ``None`` (Llama 4's ``full_attention``), one that mixes
    them is an error (SmolLM3's single type), and without a layer type the rotation is
    that of the layers that rotate. Without ``no_rope_layers`` the list is derived as the
    config class derives it. (Every layer type was read as rotating.)"""
    import importlib

    config_name, attention_name = NO_ROPE_LAYERS[family]
    configs = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    sizes = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(configs, config_name)(num_hidden_layers=8, **sizes)
        attention = getattr(module, attention_name)
        rotates = [bool(attention(config, layer_idx=i).use_rope) for i in range(8)]
    assert True in rotates  # the case is there
    assert False in rotates
    source = config.to_dict()
    if derived:
        del source["no_rope_layers"]
    by_type: dict[str, set[bool]] = {}
    for kind, rotated in zip(config.layer_types, rotates, strict=True):
        by_type.setdefault(kind, set()).add(rotated)
    if any(len(seen) > 1 for seen in by_type.values()):
        with pytest.raises(ValueError, match=r"in different ways.*`no_rope_layers`"):
            anyrope.RoPE.from_hf_config_layers(source)
    else:
        ropes = anyrope.RoPE.from_hf_config_layers(source)
        assert {kind: ropes[kind] is not None for kind in by_type} == {
            kind: next(iter(seen)) for kind, seen in by_type.items()
        }
    assert anyrope.RoPE.from_hf_config(source) is not None


@pytest.mark.parametrize("family", ["granite_swa", "granitemoe_swa", "muse_spark"])
def test_layer_rope_theta_gives_each_layer_type_its_base_or_none(family: str) -> None:
    """``layer_rope_theta``: Granite-SWA builds one rotary module per non-zero base and
    gives layers of base 0 none; MuseSpark gives layers of 0 none and the others the
    config's base. Read from the model's own modules."""
    import importlib

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    configs = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    sizes = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if family == "muse_spark":
            config = configs.MuseSparkTextConfig(num_hidden_layers=8, **sizes)
            bases = [500000.0 if theta else None for theta in config.layer_rope_theta]
        else:
            config_class = next(
                getattr(configs, name) for name in dir(configs) if name.endswith("SWAConfig")
            )
            thetas = [0, *([1e6] * 3)] * 2
            config = config_class(num_hidden_layers=8, layer_rope_theta=thetas, **sizes)
            model_class = next(
                getattr(module, name) for name in dir(module) if name.endswith("SWAModel")
            )
            built = {
                emb.config.rope_parameters["rope_theta"] for emb in model_class(config).rotary_embs
            }
            assert built == {1e6}
            bases = [theta or None for theta in thetas]
    expected = dict(zip(config.layer_types, bases, strict=True))
    assert set(expected.values()) == {None, bases[1]}  # both cases are there
    for source in (config, config.to_dict()):
        ropes = anyrope.RoPE.from_hf_config_layers(source)
        assert {kind: rope and rope.base for kind, rope in ropes.items()} == expected


def _with_fraction(config: Any, layer_type: str | None, fraction: float) -> Any:
    """``config`` with ``partial_rotary_factor`` in its (layer type's) settings."""
    changed = copy.deepcopy(config)
    settings = (
        changed.rope_parameters if layer_type is None else changed.rope_parameters[layer_type]
    )
    settings["partial_rotary_factor"] = fraction
    return changed


@pytest.mark.parametrize("family", FAMILIES)
def test_a_partial_rotary_factor_is_read_as_the_family_reads_it(family: str) -> None:
    """A ``partial_rotary_factor`` of 0.5 added to each family's settings: anyrope
    rotates what the family's own code rotates, or refuses with a clear error. Where it
    refuses because the family turns the whole head
    (:data:`anyrope.scaling.hf.WHOLE_HEAD_MODEL_TYPES`), the family's code does rotate
    the whole head with the fraction given: the rotation of the config without it."""
    import importlib

    import torch

    try:
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        rotary_class, config = hf_families._rotary_and_config(module, hf_families._config(family))
    except Exception as error:
        pytest.skip(f"the family's default config does not build: {error}")
    if not isinstance(getattr(config, "rope_parameters", None), dict):
        pytest.skip("the family's config has no rope_parameters")
    # A config class of another family (GLM-ASR's Llama text model) is checked there.
    own = type(config).__module__ == f"transformers.models.{family}.configuration_{family}"
    nested = layer_types(config)
    for layer_type in [None] if nested is None else nested:
        if nested is not None and config.rope_parameters[layer_type] is None:
            continue
        label = family if layer_type is None else f"{family}[{layer_type}]"
        if label in NOT_DRIVEN:
            continue
        halved = _with_fraction(config, layer_type, 0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = hf_families._drive_one(label, module, rotary_class, halved, layer_type)
        assert outcome.kind in ("match", "anyrope error", "not driven"), outcome
        if not own or "turns the whole head" not in outcome.detail:
            continue
        rope = anyrope.RoPE.from_hf_config(config, layer_type=layer_type)
        generator = torch.Generator().manual_seed(0)
        q, k = (torch.randn(1, 2, 6, rope.head_dim, generator=generator) for _ in range(2))
        positions = torch.arange(100, 106)[None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = hf_families._hf_rotation(
                module, rotary_class, halved, q, k, positions, layer_type
            )
        if rope.sections is not None:  # M-RoPE: text positions, the same in every stream
            positions = positions.expand(len(rope.sections), -1, -1)
        ours = rope(q, k, positions, layout="bhsd", impl="array_api")
        for a, b in zip(theirs[:2], ours, strict=True):
            assert float((a - b).abs().max()) <= 2e-3, label
