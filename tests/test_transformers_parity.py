"""anyrope's scaling against transformers' own RoPE initialisers (optional: ``nox -s tests-hf``).

Pinned to transformers 5.23.0 (the version the ``tests-hf`` nox session installs):
YaRN's ``factor`` changed meaning between releases (4.4x/4.5x derived it from
``max_position_embeddings / original_max_position_embeddings``; 5.x uses the dict's
``factor``), so the comparison is only meaningful against one pinned release.

transformers computes frequencies in float32 and anyrope in float64, so the
frequencies agree to float32 rounding (relative 1e-6), not bitwise.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hf_families

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

import anyrope  # noqa: E402
from anyrope.scaling import from_hf_config  # noqa: E402

CONFIGS = Path(__file__).parent / "configs"
RTOL = 1e-6


def _load(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CONFIGS / name).read_text())
    return config


def _hf_config(config: dict[str, Any]) -> Any:
    hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    return hf.get_text_config()


def _hf_frequencies(hf: Any, seq_len: int | None = None) -> tuple[np.ndarray[Any, Any], float]:
    rope_type = hf.rope_parameters["rope_type"]
    if rope_type == "default":
        module = __import__(
            type(hf).__module__.replace("configuration_", "modeling_"), fromlist=["_"]
        )
        rotary = next(
            getattr(module, name)
            for name in dir(module)
            if name.endswith("RotaryEmbedding") and "Vision" not in name
        )
        inv_freq, factor = rotary.compute_default_rope_parameters(hf)
    else:
        inv_freq, factor = rope_utils.ROPE_INIT_FUNCTIONS[rope_type](hf, "cpu", seq_len=seq_len)
    return inv_freq.double().numpy(), float(factor)


def _assert_agrees(config: dict[str, Any], seq_len: int | None = None) -> None:
    settings = from_hf_config(config)
    ours, our_factor = settings.scaling.frequencies(
        settings.rotary_dim, settings.base, seq_len=seq_len
    )
    theirs, their_factor = _hf_frequencies(_hf_config(config), seq_len)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=0)
    assert math.isclose(our_factor, their_factor, rel_tol=1e-12)


def test_pinned_version() -> None:
    """The formulas are pinned to one release; a different one needs a fresh look."""
    unpinned = hf_families.unpinned_reason(transformers.__version__)
    assert unpinned is None, unpinned


@pytest.mark.parametrize("name", sorted(path.name for path in CONFIGS.glob("*.json")))
def test_real_config(name: str) -> None:
    config = _load(name)
    _assert_agrees(config)
    settings = from_hf_config(config)
    if settings.scaling.depends_on_length:
        for seq_len in (1, 4096, 4097, 200_000):
            _assert_agrees(config, seq_len)


LLAMA = {
    "model_type": "llama",
    "hidden_size": 1024,
    "num_attention_heads": 8,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
}

SYNTHETIC = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048},
    "yarn-explicit-attention": {
        "rope_type": "yarn",
        "factor": 16.0,
        "original_max_position_embeddings": 2048,
        "attention_factor": 1.0,
    },
    "yarn-mscale": {
        "rope_type": "yarn",
        "factor": 16.0,
        "original_max_position_embeddings": 2048,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    },
    "yarn-mscale-unequal": {
        "rope_type": "yarn",
        "factor": 16.0,
        "original_max_position_embeddings": 2048,
        "mscale": 1.0,
        "mscale_all_dim": 0.5,
    },
    "yarn-no-truncate": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 2048,
        "beta_fast": 16,
        "beta_slow": 2,
        "truncate": False,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    },
    "longrope-factor": {
        "rope_type": "longrope",
        "factor": 8.0,
        "original_max_position_embeddings": 1024,
        "short_factor": [1.0 + 0.01 * i for i in range(64)],
        "long_factor": [1.0 + 0.5 * i for i in range(64)],
    },
}


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_every_method(name: str) -> None:
    config = {**LLAMA, "rope_scaling": SYNTHETIC[name]}
    _assert_agrees(config)
    for seq_len in (100, 1024, 1025, 4096, 4097, 10_000):
        _assert_agrees(config, seq_len)


def test_deepseek_v3_softmax_scale() -> None:
    """transformers folds ``mscale(factor, mscale_all_dim) ** 2`` into the attention scaling."""
    config = _load("deepseek-v3.json")
    hf = transformers.AutoConfig.for_model(**copy.deepcopy(config))
    attention = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention(hf, 0)
    head_dim = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    settings = from_hf_config(config)
    assert math.isclose(
        attention.scaling, head_dim**-0.5 * settings.scaling.softmax_scale, rel_tol=1e-12
    )


def test_mrope_tables_match_qwen2_vl() -> None:
    """Section s of the pairs takes stream s: transformers' Qwen2-VL text rotary embedding."""
    modeling = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    config = _load("qwen2-vl-7b-instruct.json")
    hf = _hf_config(config)
    streams = torch.randint(0, 300, (3, 2, 12))
    cos, sin = modeling.Qwen2VLRotaryEmbedding(hf)(torch.ones(1, dtype=torch.float64), streams)
    rope = anyrope.RoPE.from_hf_config(config)
    ours_cos, ours_sin = rope.tables(streams.numpy(), dtype=np.float64)
    pairs = rope.rotary_dim // 2
    for theirs, ours in ((cos.numpy(), ours_cos), (sin.numpy(), ours_sin)):
        np.testing.assert_allclose(ours, theirs[..., :pairs], rtol=0, atol=1e-4)
        np.testing.assert_allclose(ours, theirs[..., pairs:], rtol=0, atol=1e-4)


def test_axial_tables_match_qwen2_vl_vision() -> None:
    """transformers' rope_type='axial': rows take the first half of the pairs."""
    modeling = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    vision = transformers.Qwen2VLConfig().vision_config
    rows, cols = torch.meshgrid(torch.arange(7), torch.arange(5), indexing="ij")
    grid = torch.stack([rows.flatten(), cols.flatten()], dim=-1)
    cos, sin = modeling.Qwen2VLVisionRotaryEmbedding(vision)(torch.ones(1), grid)
    rope = anyrope.RoPE.from_hf_config(vision)
    assert rope.scaling.rope_type == "axial"
    ours_cos, ours_sin = rope.tables(grid.numpy(), dtype=np.float64)
    pairs = rope.rotary_dim // 2
    for theirs, ours in ((cos.double().numpy(), ours_cos), (sin.double().numpy(), ours_sin)):
        np.testing.assert_allclose(ours, theirs[..., :pairs], rtol=0, atol=1e-5)
        np.testing.assert_allclose(ours, theirs[..., pairs:], rtol=0, atol=1e-5)
