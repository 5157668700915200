"""A pre-norm transformer decoder block in NumPy alone, with RoPE from anyrope.

RMSNorm, grouped-query causal self-attention with rotary positions, and a SwiGLU MLP,
as in Llama-family models; no PyTorch anywhere. The script checks two properties a
correct RoPE block must have and prints what it checked.

Run: ``python examples/numpy_transformer_block.py``
"""

from __future__ import annotations

import math
import sys

import numpy as np

import anyrope


class Block:
    """One decoder block with random weights (float32)."""

    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = hidden // n_heads

        def weight(rows: int, cols: int) -> np.ndarray:
            return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

        self.wq = weight(n_heads * self.head_dim, hidden)
        self.wk = weight(n_kv_heads * self.head_dim, hidden)
        self.wv = weight(n_kv_heads * self.head_dim, hidden)
        self.wo = weight(hidden, n_heads * self.head_dim)
        self.w_gate, self.w_up = weight(4 * hidden, hidden), weight(4 * hidden, hidden)
        self.w_down = weight(hidden, 4 * hidden)
        self.rope = anyrope.RoPE(self.head_dim, base=10000.0)

    @staticmethod
    def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)

    def attention(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        batch, seq, _ = x.shape
        q = (x @ self.wq.T).reshape(batch, seq, self.n_heads, self.head_dim)
        k = (x @ self.wk.T).reshape(batch, seq, self.n_kv_heads, self.head_dim)
        v = (x @ self.wv.T).reshape(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = self.rope(q, k, positions)  # layout "bshd": (batch, seq, heads, head_dim)
        group = self.n_heads // self.n_kv_heads
        k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
        scores = np.einsum("bshd,bthd->bhst", q, k) / math.sqrt(self.head_dim)
        causal = np.triu(np.ones((seq, seq), dtype=bool), k=1)
        scores = np.where(causal, -np.inf, scores)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = scores / scores.sum(axis=-1, keepdims=True)
        out = np.einsum("bhst,bthd->bshd", weights, v).reshape(batch, seq, -1)
        return out @ self.wo.T

    def mlp(self, x: np.ndarray) -> np.ndarray:
        gate = x @ self.w_gate.T
        return ((gate / (1.0 + np.exp(-gate))) * (x @ self.w_up.T)) @ self.w_down.T

    def __call__(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        x = x + self.attention(self.rms_norm(x), positions)
        return x + self.mlp(self.rms_norm(x))


def main() -> int:
    batch, seq, hidden = 2, 12, 256
    block = Block(hidden, n_heads=8, n_kv_heads=2)
    x = np.random.default_rng(1).standard_normal((batch, seq, hidden)).astype(np.float32)
    positions = np.arange(seq)

    y = block(x, positions)
    assert y.shape == x.shape
    assert y.dtype == np.float32

    # RoPE makes attention depend on relative positions only: shifting every position
    # by the same offset changes nothing but rounding.
    shifted = block(x, positions + 1000)
    shift_error = float(np.abs(shifted - y).max())
    assert shift_error < 1e-3, shift_error

    # Causal attention: the first tokens' outputs do not depend on later tokens.
    prefix = block(x[:, :5], positions[:5])
    assert np.allclose(prefix, y[:, :5], atol=1e-4)

    print(f"block output {y.shape} {y.dtype}; shift by 1000 changes it by {shift_error:.1e}")
    print("numpy-only: ", "torch" not in sys.modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
