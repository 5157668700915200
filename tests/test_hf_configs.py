"""Real model configs (tests/configs/*.json, as published) read by ``from_hf_config``.

Each is checked against the formulas in float64 with numbers worked out by hand from
the published values; test_transformers_parity.py checks the same files against
transformers itself.
"""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anyrope.scaling import default, from_hf_config, yarn

CONFIGS = Path(__file__).parent / "configs"


def _load(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return config


EXPECTED = {
    # name: (head_dim, rotary_dim, base, interleaved, rope_type, max_position_embeddings)
    "llama-3.1-8b": (128, 128, 500000.0, False, "llama3", 131072),
    "qwen2.5-7b-instruct-yarn": (128, 128, 1e6, False, "yarn", 32768),
    "phi-3-mini-128k-instruct": (96, 96, 10000.0, False, "longrope", 131072),
    "deepseek-v3": (64, 64, 10000.0, True, "yarn", 163840),
    "gpt-neox-20b": (96, 24, 10000.0, False, "default", 2048),
    "gemma-2-9b": (256, 256, 10000.0, False, "default", 8192),
    "mistral-7b-v0.2": (128, 128, 1e6, False, "default", 32768),
    "codellama-7b": (128, 128, 1e6, False, "default", 16384),
    "qwen2-vl-7b-instruct": (128, 128, 1e6, False, "default", 32768),
}


def test_every_config_file_is_covered() -> None:
    assert {path.stem for path in CONFIGS.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_settings(name: str) -> None:
    settings = from_hf_config(_load(name))
    head_dim, rotary_dim, base, interleaved, rope_type, lmax = EXPECTED[name]
    assert settings.head_dim == head_dim
    assert settings.rotary_dim == rotary_dim
    assert settings.base == base
    assert settings.interleaved is interleaved
    assert settings.scaling.rope_type == rope_type
    assert settings.max_position_embeddings == lmax
    kwargs = settings.kwargs()
    assert kwargs["scaling"] is settings.scaling
    assert kwargs["rotary_dim"] == rotary_dim


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_object_with_attributes_reads_the_same(name: str) -> None:
    """A transformers PretrainedConfig is read through its attributes."""
    config = _load(name)
    assert from_hf_config(types.SimpleNamespace(**config)) == from_hf_config(config)


@pytest.mark.parametrize("name", ["gpt-neox-20b", "gemma-2-9b", "mistral-7b-v0.2", "codellama-7b"])
def test_unscaled_models(name: str) -> None:
    settings = from_hf_config(_load(name))
    freq, factor = settings.scaling.frequencies(settings.rotary_dim, settings.base)
    d, b = settings.rotary_dim, settings.base
    np.testing.assert_allclose(freq, [b ** (-2 * i / d) for i in range(d // 2)], rtol=1e-14)
    assert factor == 1.0
    assert settings.scaling.softmax_scale == 1.0


def test_gemma_uses_the_explicit_head_dim() -> None:
    config = _load("gemma-2-9b")
    assert config["hidden_size"] // config["num_attention_heads"] == 224
    assert from_hf_config(config).head_dim == 256


def test_llama31() -> None:
    settings = from_hf_config(_load("llama-3.1-8b"))
    freq, factor = settings.scaling.frequencies(128, 500000.0)
    unscaled = default.inv_freq(128, 500000.0)
    wavelen = 2 * math.pi / unscaled
    # wavelengths below 8192/4 = 2048 keep their frequency; above 8192/1 are divided by 8
    fast, slow = wavelen < 2048, wavelen > 8192
    # 2 pi * 500000 ** (i / 64) < 2048  <=>  i <= 28;  > 8192  <=>  i >= 35
    assert np.flatnonzero(fast).tolist() == list(range(29))
    assert np.flatnonzero(slow).tolist() == list(range(35, 64))
    np.testing.assert_array_equal(freq[fast], unscaled[fast])
    np.testing.assert_array_equal(freq[slow], unscaled[slow] / 8.0)
    middle = ~(fast | slow)
    ratio = unscaled[middle] / freq[middle]
    assert np.all((ratio > 1) & (ratio < 8))
    assert factor == 1.0


def test_qwen25_yarn() -> None:
    settings = from_hf_config(_load("qwen2.5-7b-instruct-yarn"))
    scaling = settings.scaling
    assert (scaling.factor, scaling.original_max_position_embeddings) == (4.0, 32768)
    _, factor = scaling.frequencies(128, 1e6)
    assert math.isclose(factor, 0.1 * math.log(4.0) + 1.0, rel_tol=1e-15)
    assert scaling.softmax_scale == 1.0


def test_deepseek_v3() -> None:
    settings = from_hf_config(_load("deepseek-v3"))
    scaling = settings.scaling
    freq, factor = scaling.frequencies(64, 10000.0)
    assert factor == 1.0  # mscale / mscale_all_dim = 1: not mscale(40) = 1.3689
    assert math.isclose(scaling.softmax_scale, (0.1 * math.log(40.0) + 1.0) ** 2, rel_tol=1e-15)
    expected = yarn.inv_freq(64, 10000.0, factor=40.0, original_max_position_embeddings=4096)
    np.testing.assert_array_equal(freq, expected)


def test_phi3_longrope() -> None:
    config = _load("phi-3-mini-128k-instruct")
    short = config["rope_scaling"]["short_factor"]
    long = config["rope_scaling"]["long_factor"]
    assert len(short) == len(long) == 48
    settings = from_hf_config(config)
    scaling = settings.scaling
    assert scaling.original_max_position_embeddings == 4096
    unscaled = default.inv_freq(96, 10000.0)
    attention = math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))
    for seq_len, factors in [(None, short), (4096, short), (4097, long), (131072, long)]:
        freq, factor = scaling.frequencies(96, 10000.0, seq_len=seq_len)
        np.testing.assert_allclose(freq, unscaled / np.array(factors), rtol=1e-15)
        assert math.isclose(factor, attention, rel_tol=1e-15)


def test_qwen2_vl_mrope_section() -> None:
    settings = from_hf_config(_load("qwen2-vl-7b-instruct"))
    assert settings.scaling.mrope_section == (16, 24, 24)


def test_rope_parameters_form_of_transformers_5() -> None:
    """Newer configs keep rope_theta (and the type) inside ``rope_parameters``."""
    config = {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    settings = from_hf_config(config)
    assert settings.base == 500000.0
    assert settings.scaling == from_hf_config(_load("llama-3.1-8b")).scaling.__class__(
        **{**from_hf_config(_load("llama-3.1-8b")).scaling.__dict__, "rope_theta": 500000.0}
    )


def test_partial_rotary_inside_rope_parameters() -> None:
    config = {
        "hidden_size": 2560,
        "num_attention_heads": 32,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.4,
        },
    }
    assert from_hf_config(config).rotary_dim == 32


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"rope_theta": 1e6, "rotary_emb_base": 1e4},
            ValueError,
            "`rope_theta`=1000000.0 and `rotary_emb_base`",
        ),
        ({"rope_parameters": {"rope_theta": 1e6}, "rope_theta": 1e4}, ValueError, "disagree"),
        (
            {"partial_rotary_factor": 0.5, "rotary_pct": 0.25},
            ValueError,
            "`partial_rotary_factor`=0.5",
        ),
        # StableLM rotates the fraction it is given (Mistral, whatever it says, the whole
        # head: refused for any fraction below 1, see test_hf_families).
        (
            {"model_type": "stablelm", "partial_rotary_factor": 0.09},
            ValueError,
            "odd or empty rotary width",
        ),
        (
            {"partial_rotary_factor": 0.0},
            ValueError,
            r"`partial_rotary_factor` must be in \(0, 1\]",
        ),
        ({"hidden_size": 100, "num_attention_heads": 3}, ValueError, "not a multiple"),
        ({"head_dim": -4}, ValueError, "`head_dim` must be a positive integer"),
        ({"max_position_embeddings": "4096"}, TypeError, "`max_position_embeddings` must be an"),
        ({"rope_scaling": "su"}, TypeError, "`rope_scaling` must be a dict"),
        ({"rope_interleave": 1}, TypeError, "`rope_interleave` must be true or false"),
        ({"rope_theta": 0.5}, ValueError, "`base` must be a finite number greater than 1"),
        (
            {
                "rope_scaling": {
                    "type": "longrope",
                    "short_factor": [1.0] * 32,
                    "long_factor": [1.0] * 32,
                }
            },
            ValueError,
            "`short_factor` must have rotary_dim // 2 = 64 entries; got 32",
        ),
        (
            {
                "rope_scaling": {"type": "yarn", "factor": 4.0},
                "rope_parameters": {"type": "linear", "factor": 2.0},
            },
            ValueError,
            "`rope_parameters`=.* and `rope_scaling`=.* disagree",
        ),
    ],
)
def test_contradictions_and_bad_values(
    change: dict[str, Any], error: type[Exception], message: str
) -> None:
    config = {**_load("mistral-7b-v0.2"), **change}
    with pytest.raises(error, match=message):
        from_hf_config(config)


def test_missing_head_dim_keys() -> None:
    with pytest.raises(
        ValueError, match=r"needs `head_dim`, or `hidden_size` and `num_attention_heads`"
    ):
        from_hf_config({"rope_theta": 1e4})


def test_absent_theta_is_transformers_default() -> None:
    assert from_hf_config({"head_dim": 64}).base == 10000.0


def test_axial_vision_tower_uses_embed_dim() -> None:
    """Qwen2-VL's vision config: attention width ``embed_dim``, ``hidden_size`` is the merger's."""
    vision = {
        "embed_dim": 1280,
        "hidden_size": 3584,
        "num_heads": 16,
        "num_attention_heads": 16,
        "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
    }
    settings = from_hf_config(vision)
    assert (settings.head_dim, settings.rotary_dim) == (80, 80)
    assert settings.scaling.sections(80) == (20, 20)
    text = {**vision, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    assert from_hf_config(text).head_dim == 224


# -- the family decides what a config does not say ------------------------------------

_SMALL = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 2048}


@pytest.mark.parametrize(
    "model_type", ["cohere", "glm4", "ernie4_5", "helium", "llama4_text", "mistral_large4_text"]
)
def test_interleaved_families(model_type: str) -> None:
    # Mistral Large 4 scales by default: a config must give its settings.
    config = {**_SMALL, "model_type": model_type, "rope_parameters": {"rope_type": "default"}}
    assert from_hf_config(config).interleaved is True


def test_half_split_families_and_rope_interleave_first() -> None:
    assert from_hf_config({**_SMALL, "model_type": "llama"}).interleaved is False
    assert from_hf_config({**_SMALL, "model_type": "qwen2"}).interleaved is False
    # A config that says it decides (DeepSeek-V3's flag), whatever the family.
    config = {**_SMALL, "model_type": "deepseek_v3", "rope_interleave": False}
    assert from_hf_config(config).interleaved is False
    assert from_hf_config({**_SMALL, "model_type": "llama", "rope_interleave": True}).interleaved


def test_negative_angle_family_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"model_type='nanochat' rotates by the negative angle"):
        from_hf_config({**_SMALL, "model_type": "nanochat"})


def test_latent_attention_rope_part_is_the_rotary_width() -> None:
    """Mistral 4: qk_rope_head_dim 64 is rotated whole; its partial_rotary_factor 0.5 is of
    head_dim 128 (the same 64), not of the rope part (which would give 32)."""
    config = {
        **_SMALL,
        "head_dim": 128,
        "qk_rope_head_dim": 64,
        "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5},
    }
    settings = from_hf_config(config)
    assert (settings.head_dim, settings.rotary_dim) == (64, 64)
    assert settings.scaling.partial_rotary_factor is None
    config["rope_parameters"]["partial_rotary_factor"] = 0.25
    with pytest.raises(ValueError, match=r"of `head_dim`=128 is 32 features, but `qk_rope"):
        from_hf_config(config)
    del config["head_dim"]
    with pytest.raises(ValueError, match=r"needs `head_dim` in the model config"):
        from_hf_config(config)


# -- settings per layer type (Gemma 3, ModernBERT, OLMo 3, ...) ------------------------

_GEMMA3 = {
    "model_type": "gemma3_text",
    "head_dim": 256,
    "max_position_embeddings": 131072,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    },
}


def test_per_layer_type_settings_need_a_layer_type() -> None:
    from anyrope.scaling.hf import layer_types

    assert layer_types(_GEMMA3) == ("sliding_attention", "full_attention")
    with pytest.raises(ValueError, match=r"per layer type \('sliding_attention', 'full_att"):
        from_hf_config(_GEMMA3)
    full = from_hf_config(_GEMMA3, layer_type="full_attention")
    assert (full.base, full.scaling.rope_type, full.scaling.factor) == (1e6, "linear", 8.0)
    sliding = from_hf_config(_GEMMA3, layer_type="sliding_attention")
    assert (sliding.base, sliding.scaling.rope_type) == (10000.0, "default")
    with pytest.raises(
        ValueError, match=r"`layer_type`='global' is not one of the model config's layer types"
    ):
        from_hf_config(_GEMMA3, layer_type="global")


def test_layer_without_rope_says_so() -> None:
    config = {**_GEMMA3, "rope_parameters": {**_GEMMA3["rope_parameters"], "nope": None}}
    with pytest.raises(ValueError, match=r"layer type 'nope' has no RoPE"):
        from_hf_config(config, layer_type="nope")


def test_every_layer_type_at_once() -> None:
    import anyrope

    ropes = anyrope.RoPE.from_hf_config_layers(_GEMMA3)
    assert list(ropes) == ["sliding_attention", "full_attention"]
    assert ropes["full_attention"].scaling.rope_type == "linear"
    assert ropes["sliding_attention"].base == 10000.0
    # One set of settings: the same RoPE for every layer type the config lists.
    uniform = {**_SMALL, "layer_types": ["sliding_attention", "full_attention"]}
    same = anyrope.RoPE.from_hf_config_layers(uniform)
    assert same["sliding_attention"] is same["full_attention"]
    assert list(anyrope.RoPE.from_hf_config_layers(_SMALL)) == ["default"]
    with pytest.raises(ValueError, match=r"`layer_type`='x' is not one of the model config's"):
        anyrope.RoPE.from_hf_config(uniform, layer_type="x")
    rope = anyrope.RoPE.from_hf_config(uniform, layer_type="full_attention")
    assert repr(rope) == repr(same["full_attention"])


@pytest.mark.parametrize(
    ("model_type", "scaling"),
    [
        ("qwen3_vl_text", {"rope_type": "default", "mrope_section": [8, 12, 12]}),
        ("cosmos3_edge_text", {"rope_type": "default", "mrope_section": [8, 12, 12]}),
        (
            "qwen3_vl_text",
            {"rope_type": "default", "mrope_section": [8, 12, 12], "mrope_interleaved": False},
        ),
        (
            "some_new_vl",
            {"rope_type": "default", "mrope_section": [8, 12, 12], "mrope_interleaved": True},
        ),
    ],
)
def test_interleaved_m_rope_is_read(model_type: str, scaling: dict[str, Any]) -> None:
    """The Qwen3-VL families interleave whatever the key says; another model, by the key."""
    config = {**_SMALL, "model_type": model_type, "rope_scaling": scaling}
    parsed = from_hf_config(config).scaling
    assert parsed.mrope_interleaved
    assert parsed.mrope_section == (8, 12, 12)


def test_qwen2_vl_m_rope_stays_contiguous() -> None:
    config = {
        **_SMALL,
        "model_type": "qwen2_vl",
        "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
    }
    assert not from_hf_config(config).scaling.mrope_interleaved


@pytest.mark.parametrize("model_type", ["ernie4_5_vl_moe_text", "hunyuan_vl_text"])
def test_m_rope_of_another_layout_is_refused(model_type: str) -> None:
    config = {
        **_SMALL,
        "model_type": model_type,
        "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]},
    }
    with pytest.raises(ValueError, match=r"lays out its M-RoPE streams in its own way"):
        from_hf_config(config)


def test_contiguous_m_rope_and_text_only_configs_are_read() -> None:
    sections = {"rope_type": "default", "mrope_section": [8, 12, 12]}
    qwen2_vl = from_hf_config({**_SMALL, "model_type": "qwen2_vl", "rope_scaling": sections})
    assert qwen2_vl.scaling.mrope_section == (8, 12, 12)
    # Without sections in the config, the family's code falls back to its own: contiguous
    # ones must cover the pairs; Qwen3-VL's interleaved layout takes what there is.
    wide = {"hidden_size": 1024, "num_attention_heads": 8}
    qwen2_vl = from_hf_config({**wide, "model_type": "qwen2_vl_text"})
    assert qwen2_vl.scaling.mrope_section == (16, 24, 24)
    qwen3_vl = from_hf_config({**wide, "model_type": "qwen3_vl_text"})
    assert qwen3_vl.scaling.mrope_section == (24, 20, 20)
    assert qwen3_vl.scaling.mrope_interleaved
    narrow = {"hidden_size": 512, "num_attention_heads": 8}
    assert from_hf_config({**narrow, "model_type": "qwen3_vl_text"}).scaling.mrope_section == (
        11,
        11,
        10,
    )
    with pytest.raises(ValueError, match=r"splits its 32 rotated pairs by its fallback \[16"):
        from_hf_config({**narrow, "model_type": "qwen2_vl_text"})


def test_gptj_config_json_names() -> None:
    """GPT-J / CodeGen: n_embd and n_head give the head width, rotary_dim the rotated
    width itself, and the family pairs (x[2i], x[2i+1])."""
    config = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64}
    settings = from_hf_config(config)
    assert (settings.head_dim, settings.rotary_dim, settings.interleaved) == (256, 64, True)
    with pytest.raises(ValueError, match=r"both `rotary_dim`=64 and `partial_rotary_factor`"):
        from_hf_config({**config, "partial_rotary_factor": 0.25})
    for bad in (300, 63):
        with pytest.raises(
            ValueError, match=rf"`rotary_dim` must be a positive even .*; got {bad}"
        ):
            from_hf_config({**config, "rotary_dim": bad})


def _gemma4_text(**extra: Any) -> dict[str, Any]:
    return {
        "model_type": "gemma4_text",
        "hidden_size": 2304,
        "num_attention_heads": 8,
        "head_dim": 256,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": 0.25,
                "rope_theta": 1e6,
            },
        },
        "max_position_embeddings": 131072,
        **extra,
    }


@pytest.mark.parametrize(
    "extra",
    [{"global_head_dim": 512}, {}, {"per_layer_config": {"05": {"head_dim": 512}}}],
    ids=["global_head_dim", "transformers-default", "per_layer_config"],
)
def test_gemma4_full_attention_is_proportional_on_wider_heads(extra: dict[str, Any]) -> None:
    import anyrope

    layers = anyrope.RoPE.from_hf_config_layers(_gemma4_text(**extra))
    full, sliding = layers["full_attention"], layers["sliding_attention"]
    assert full is not None
    assert sliding is not None
    assert (full.head_dim, full.rotary_dim, full.base) == (512, 512, 1e6)
    assert full.scaling.rope_type == "proportional"
    expected = default.inv_freq(512, 1e6)
    expected[64:] = 0.0
    np.testing.assert_array_equal(full.inv_freq, expected)
    assert (sliding.head_dim, sliding.rotary_dim, sliding.base) == (256, 256, 10000.0)
    # The pairs past the turning share stay where they are, bit for bit.
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 512)).astype(np.float32)
    y = full.rotate(x, positions=1000)
    np.testing.assert_array_equal(y[..., 64:256], x[..., 64:256])
    np.testing.assert_array_equal(y[..., 320:], x[..., 320:])
    assert not np.array_equal(y[..., :64], x[..., :64])


def test_per_layer_overrides_must_agree_within_a_layer_type() -> None:
    config = _gemma4_text(
        layer_types=["full_attention", "sliding_attention", "full_attention"],
        per_layer_config={"0": {"head_dim": 512}, "2": {"head_dim": 384}},
    )
    with pytest.raises(ValueError, match="layers of type 'full_attention' differ"):
        from_hf_config(config, layer_type="full_attention")
    assert from_hf_config(config, layer_type="sliding_attention").head_dim == 256
    flat = {"head_dim": 64, "layer_types": ["a", "b"], "per_layer_config": {"1": {"head_dim": 32}}}
    with pytest.raises(ValueError, match=r"`per_layer_config` changes head_dim.*pass layer_type="):
        from_hf_config(flat)
    assert from_hf_config(flat, layer_type="b").head_dim == 32
    assert from_hf_config(flat, layer_type="a").head_dim == 64
    unrelated = {"head_dim": 64, "per_layer_config": {"1": {"sliding_window": None}}}
    assert from_hf_config(unrelated).head_dim == 64


def test_proportional_rotates_the_whole_head() -> None:
    import anyrope

    scaling = {"rope_type": "proportional", "partial_rotary_factor": 0.25}
    with pytest.raises(ValueError, match="rotates the whole head"):
        anyrope.RoPE(128, rotary_dim=64, scaling=scaling)
    assert anyrope.RoPE(128, scaling=scaling).rotary_dim == 128


def test_llama_4_attention_temperature_is_refused_by_name() -> None:
    config = {
        "head_dim": 128,
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 16384,
            "llama_4_scaling_beta": 0.1,
            "rope_theta": 1e6,
        },
    }
    with pytest.raises(ValueError, match=r"Llama 4's attention temperature.*drop the key"):
        from_hf_config(config)
    del config["rope_parameters"]["llama_4_scaling_beta"]
    assert from_hf_config(config).scaling.rope_type == "yarn"


def test_the_transformers_pin_is_noxfiles_and_an_unpinned_skip_names_both_versions() -> None:
    """The tests pinned to one transformers release skip elsewhere, saying which release
    they found and which they are pinned to (the one the tests-hf session installs)."""
    import hf_families

    pinned = hf_families.PINNED_TRANSFORMERS
    noxfile = (Path(__file__).parents[1] / "noxfile.py").read_text()
    assert f'TRANSFORMERS = "transformers=={pinned}"' in noxfile
    assert hf_families.unpinned_reason(pinned) is None
    reason = hf_families.unpinned_reason("4.57.1")
    assert reason is not None
    assert "found transformers 4.57.1" in reason
    assert f"pinned to transformers {pinned}" in reason


def test_a_config_is_read_from_its_path(tmp_path: Path) -> None:
    """The file, the model folder that holds it, or a clear error naming the path."""
    config = {"model_type": "llama", "head_dim": 64, "rope_theta": 500000.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    for given in (tmp_path, tmp_path / "config.json", str(tmp_path / "config.json")):
        assert from_hf_config(given) == from_hf_config(config)
    with pytest.raises(ValueError, match=r"cannot read the model config '.*missing.json'"):
        from_hf_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match=r"'.*bad.json' is not JSON"):
        from_hf_config(tmp_path / "bad.json")


_NESTED = {
    "head_dim": 64,
    "max_position_embeddings": 32768,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 8.0},
    },
}


def test_settings_per_layer_type_take_their_length_from_max_position_embeddings() -> None:
    """transformers fills a layer type's ``original_max_position_embeddings`` from
    ``max_position_embeddings``, and never reads the top-level key there."""
    full = from_hf_config(_NESTED, layer_type="full_attention").scaling
    assert full.original_max_position_embeddings == 32768
    same = {**_NESTED, "original_max_position_embeddings": 32768}
    assert from_hf_config(same, layer_type="full_attention").scaling == full
    with pytest.raises(ValueError, match=r"=4096 at the top level .* does not read it there"):
        from_hf_config(
            {**_NESTED, "original_max_position_embeddings": 4096}, layer_type="full_attention"
        )


def test_yarn_truncate_inside_settings_per_layer_type_is_refused() -> None:
    """transformers reads YaRN's ``truncate`` from the top of ``rope_parameters`` only."""
    layers = dict(_NESTED["rope_parameters"])
    layers["full_attention"] = {**layers["full_attention"], "truncate": False}
    config = {**_NESTED, "rope_parameters": layers}
    with pytest.raises(ValueError, match=r"\['full_attention'\]\['truncate'\]`=False"):
        from_hf_config(config, layer_type="full_attention")
    assert from_hf_config(config, layer_type="sliding_attention").base == 10000.0


@pytest.mark.parametrize("fraction", [0.3, 0.5])
def test_a_fraction_in_a_whole_head_family_is_refused_for_what_it_is(fraction: float) -> None:
    """Llama turns the whole head whatever the fraction: the message says so for a
    fraction whose width would be odd too (it said the width was odd)."""
    config = {**_SMALL, "model_type": "llama", "partial_rotary_factor": fraction}
    with pytest.raises(ValueError, match=r"the family's rotation turns the whole head"):
        from_hf_config(config)
