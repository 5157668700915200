"""Rotate a Hugging Face Llama model's queries and keys with anyrope (transformers 5.x).

``LlamaAttention.forward`` receives the ``(cos, sin)`` tables that the model's one
``rotary_emb`` builds, and ``position_ids`` in ``**kwargs``. The subclass below makes the
same call with anyrope in place of ``apply_rotary_pos_emb``; ``use_anyrope`` installs it
in a loaded model, with one ``RoPE`` (one set of tables) for all its layers.
``docs/porting.rst`` shows this file, and ``tests/test_porting_hf.py`` tests it.

Run: ``python examples/hf_llama_anyrope.py`` (needs PyTorch and transformers; skips
without them): a 2-layer Llama with random weights gives the same logits and the same
greedy tokens with and without anyrope.
"""

from __future__ import annotations

import importlib.util
import sys

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
    print("skipped: PyTorch and transformers are not both installed")
    sys.exit(0)

import torch
from transformers.models.llama import modeling_llama

import anyrope


# [attention]
class AnyRopeLlamaAttention(modeling_llama.LlamaAttention):
    """LlamaAttention rotating q and k with ``self.rope`` (set by ``use_anyrope``)."""

    rope: anyrope.RoPE

    def forward(
        self,
        hidden_states,
        position_embeddings=None,  # transformers' (cos, sin): not used
        attention_mask=None,
        past_key_values=None,
        **kwargs,
    ):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        # was: query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        query_states, key_states = self.rope(
            query_states, key_states, kwargs["position_ids"], layout="bhsd"
        )

        if past_key_values is not None:
            key_states, value_states = past_key_values.update(
                key_states, value_states, self.layer_idx
            )

        attention_interface = modeling_llama.ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, modeling_llama.eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


def use_anyrope(model):
    """Make every attention layer of a loaded Llama model rotate with one shared RoPE."""
    rope = anyrope.RoPE.from_hf_config(model.config)  # rope_parameters, head_dim, scaling
    for layer in model.model.layers:
        # Changing the class of the module keeps its weights, device, dtype and hooks.
        layer.self_attn.__class__ = AnyRopeLlamaAttention
        layer.self_attn.rope = rope
    return model
    # [/attention]


def small_llama(seed: int = 0):  # type: ignore[no-untyped-def]
    """A 2-layer Llama with random weights, in float32 and eager attention."""
    config = modeling_llama.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    return modeling_llama.LlamaForCausalLM(config).eval()


def main() -> int:
    reference = small_llama()
    model = use_anyrope(small_llama())
    input_ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    with torch.no_grad():
        expected = reference(input_ids).logits
        logits = model(input_ids).logits
        greedy = {"max_new_tokens": 20, "do_sample": False, "pad_token_id": 0}
        tokens = model.generate(input_ids, attention_mask=attention_mask, **greedy)
        expected_tokens = reference.generate(input_ids, attention_mask=attention_mask, **greedy)
    difference = float((logits - expected).abs().max())
    assert difference < 1e-4, difference
    assert torch.equal(tokens, expected_tokens)
    print(f"logits {tuple(logits.shape)}: anyrope vs transformers max difference {difference:.1e}")
    print(f"{tokens.shape[1] - input_ids.shape[1]} greedy tokens with the KV cache: identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
