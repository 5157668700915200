"""Port a Llama attention layer from PyTorch to NumPy and get the same logits.

The PyTorch side is written the way Hugging Face's ``LlamaAttention`` is (q/k/v/o
projections, ``rotate_half``, grouped-query attention, causal softmax). Its
``state_dict`` is the "checkpoint"; the NumPy side loads those weights and replaces the
rotary code with one anyrope call. The attention logits (the scores before the
softmax) and the outputs agree to float32 rounding. A second NumPy port runs the same
checkpoint converted to Meta's interleaved layout with ``anyrope.permute_qk_weights``.

Run: ``python examples/port_llama_attention.py`` (needs PyTorch; skips without it).
"""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np

import anyrope

HIDDEN, N_HEADS, N_KV_HEADS, BASE = 256, 8, 2, 500000.0
HEAD_DIM = HIDDEN // N_HEADS


def torch_attention(state: dict, x, position_ids):  # type: ignore[no-untyped-def]
    """The PyTorch original: Hugging Face Llama attention, eager."""
    import torch

    def rotate_half(t):  # type: ignore[no-untyped-def]
        t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    batch, seq, _ = x.shape
    q = (x @ state["q_proj.weight"].T).view(batch, seq, N_HEADS, HEAD_DIM).transpose(1, 2)
    k = (x @ state["k_proj.weight"].T).view(batch, seq, N_KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = (x @ state["v_proj.weight"].T).view(batch, seq, N_KV_HEADS, HEAD_DIM).transpose(1, 2)
    inv_freq = 1.0 / (BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
    freqs = (inv_freq[None, :, None] @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(N_HEADS // N_KV_HEADS, dim=1)
    v = v.repeat_interleave(N_HEADS // N_KV_HEADS, dim=1)
    logits = q @ k.transpose(2, 3) / math.sqrt(HEAD_DIM)
    causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    weights = torch.softmax(logits.masked_fill(causal, float("-inf")), dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(batch, seq, -1)
    return logits, out @ state["o_proj.weight"].T


def numpy_attention(
    state: dict[str, np.ndarray], x: np.ndarray, positions: np.ndarray, *, interleaved: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The NumPy port: same weights, RoPE from anyrope."""
    batch, seq, _ = x.shape
    q = (x @ state["q_proj.weight"].T).reshape(batch, seq, N_HEADS, HEAD_DIM)
    k = (x @ state["k_proj.weight"].T).reshape(batch, seq, N_KV_HEADS, HEAD_DIM)
    v = (x @ state["v_proj.weight"].T).reshape(batch, seq, N_KV_HEADS, HEAD_DIM)
    q, k = anyrope.rotate_qk(q, k, positions, base=BASE, interleaved=interleaved)
    k = np.repeat(k, N_HEADS // N_KV_HEADS, axis=2)
    v = np.repeat(v, N_HEADS // N_KV_HEADS, axis=2)
    logits = np.einsum("bshd,bthd->bhst", q, k) / np.float32(math.sqrt(HEAD_DIM))
    causal = np.triu(np.ones((seq, seq), dtype=bool), k=1)
    masked = np.where(causal, -np.inf, logits)
    weights = np.exp(masked - masked.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.einsum("bhst,bthd->bshd", weights, v).reshape(batch, seq, -1)
    return logits, out @ state["o_proj.weight"].T


def main() -> int:
    if importlib.util.find_spec("torch") is None:
        print("skipped: PyTorch is not installed")
        return 0
    import torch

    torch.manual_seed(0)
    layers = {
        "q_proj": torch.nn.Linear(HIDDEN, N_HEADS * HEAD_DIM, bias=False),
        "k_proj": torch.nn.Linear(HIDDEN, N_KV_HEADS * HEAD_DIM, bias=False),
        "v_proj": torch.nn.Linear(HIDDEN, N_KV_HEADS * HEAD_DIM, bias=False),
        "o_proj": torch.nn.Linear(N_HEADS * HEAD_DIM, HIDDEN, bias=False),
    }
    state = {f"{name}.weight": layer.weight.detach() for name, layer in layers.items()}
    x = torch.randn(2, 16, HIDDEN)
    position_ids = torch.arange(16).expand(2, 16) + torch.tensor([[0], [40]])

    with torch.no_grad():
        torch_logits, torch_out = torch_attention(state, x, position_ids)

    checkpoint = {name: w.numpy() for name, w in state.items()}
    logits, out = numpy_attention(checkpoint, x.numpy(), position_ids.numpy(), interleaved=False)
    np.testing.assert_allclose(logits, torch_logits.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, torch_out.numpy(), rtol=1e-4, atol=1e-5)

    meta = dict(checkpoint)
    meta["q_proj.weight"] = anyrope.permute_qk_weights(
        meta["q_proj.weight"], N_HEADS, to="interleaved"
    )
    meta["k_proj.weight"] = anyrope.permute_qk_weights(
        meta["k_proj.weight"], N_KV_HEADS, to="interleaved"
    )
    meta_logits, meta_out = numpy_attention(meta, x.numpy(), position_ids.numpy(), interleaved=True)
    np.testing.assert_allclose(meta_logits, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(meta_out, out, rtol=1e-5, atol=1e-6)

    difference = float(np.abs(logits - torch_logits.numpy()).max())
    print(f"logits {logits.shape}: NumPy port vs PyTorch max difference {difference:.1e}")
    print("Meta-layout weights with interleaved=True give the same logits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
