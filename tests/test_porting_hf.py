"""The Hugging Face porting guide, applied as written to a transformers Llama.

``docs/porting.rst`` shows ``examples/hf_llama_anyrope.py``; this file imports that
script and runs its ``use_anyrope`` on a small Llama with random weights, against the
same model unchanged: the logits agree to float32 rounding and greedy decoding with the
KV cache gives the same tokens.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import anyrope

torch = pytest.importorskip("torch", reason="the guide ports a PyTorch model")
pytest.importorskip("transformers", reason="the guide ports a transformers model")

SCRIPT = Path(__file__).parents[1] / "examples" / "hf_llama_anyrope.py"


def _guide():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("hf_llama_anyrope", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


guide = _guide()


def _assert_logits_agree(logits, expected):
    # transformers computes the angles position * inv_freq in float32 (an error of up to
    # position * 2**-24 radians); anyrope in float64, then rounds cos and sin once. At
    # positions below 64 and logits of size about 1, that is a few float32 ulps of the
    # logits: 2e-6 is 16 ulps at 1, and a model whose rotation were off by one position
    # or used the wrong axis as the sequence differs by 1e-2 or more.
    assert logits.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(logits, expected, rtol=0, atol=2e-6)


@pytest.fixture(scope="module")
def models():
    return guide.small_llama(), guide.use_anyrope(guide.small_llama())


def _prompt(left_padding):
    input_ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :left_padding] = 0
    return input_ids, attention_mask


def test_one_rope_for_the_model(models):
    _, model = models
    ropes = {id(layer.self_attn.rope) for layer in model.model.layers}
    assert len(ropes) == 1
    rope = model.model.layers[0].self_attn.rope
    assert repr(rope) == repr(anyrope.RoPE.from_hf_config(model.config))
    assert all(type(layer.self_attn) is guide.AnyRopeLlamaAttention for layer in model.model.layers)


@pytest.mark.parametrize("left_padding", [0, 5], ids=["same-length", "left-padded"])
def test_logits_match_transformers(models, left_padding):
    reference, model = models
    input_ids, attention_mask = _prompt(left_padding)
    # What generate passes: with left padding, row 1 starts at position 0 after its pads.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    inputs = {"attention_mask": attention_mask, "position_ids": position_ids}
    with torch.no_grad():
        expected = reference(input_ids, **inputs).logits
        logits = model(input_ids, **inputs).logits
    keep = attention_mask.bool()
    _assert_logits_agree(logits[keep], expected[keep])


@pytest.mark.parametrize("left_padding", [0, 5], ids=["same-length", "left-padded"])
def test_greedy_tokens_with_kv_cache(models, left_padding):
    reference, model = models
    input_ids, attention_mask = _prompt(left_padding)
    options = {
        "attention_mask": attention_mask,
        "max_new_tokens": 40,
        "do_sample": False,
        "use_cache": True,
        "pad_token_id": 0,
        "return_dict_in_generate": True,
        "output_logits": True,
    }
    with torch.no_grad():
        expected = reference.generate(input_ids, **options)
        result = model.generate(input_ids, **options)
    assert torch.equal(result.sequences, expected.sequences)
    assert result.sequences.shape[1] == input_ids.shape[1] + 40
    # Each decode step's logits too: the step's position comes from the cache length.
    for step, expected_step in zip(result.logits, expected.logits, strict=True):
        _assert_logits_agree(step, expected_step)


def test_the_rotation_is_anyropes(models):
    """The guide's model does rotate with its RoPE: a RoPE of another base changes the
    logits far beyond the tolerance above."""
    reference, _ = models
    model = guide.use_anyrope(guide.small_llama())
    for layer in model.model.layers:
        layer.self_attn.rope = anyrope.RoPE(16, base=500.0)
    input_ids, _ = _prompt(0)
    with torch.no_grad():
        difference = (model(input_ids).logits - reference(input_ids).logits).abs().max()
    assert difference > 1e-3
