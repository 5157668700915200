"""The porting guides' two sides agree.

``docs/porting.rst`` shows the code between the ``# [name]`` / ``# [/name]`` markers
of this file, so what the page shows is what is tested here. Each "before" side is
written the way its reference code writes it (PyTorch, float32 angles); anyrope uses
float64 angles, so the two agree to float32 rounding, not bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import anyrope

torch = pytest.importorskip("torch", reason="the reference code of the guides is PyTorch")


# [hf-before]
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(position_ids, head_dim, base):
    steps = torch.arange(0, head_dim, 2, dtype=torch.int64).float()
    inv_freq = 1.0 / (base ** (steps / head_dim))
    positions = position_ids[:, None, :].float()
    freqs = (inv_freq[None, :, None] @ positions).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def hf_before(q, k, position_ids, base):
    # q: (batch, heads, seq, head_dim), position_ids: (batch, seq)
    cos, sin = rotary_cos_sin(position_ids, q.shape[-1], base)
    return apply_rotary_pos_emb(q, k, cos, sin)
    # [/hf-before]


# [hf-after]
def hf_after(q, k, position_ids, base):
    return anyrope.rotate_qk(
        q,
        k,
        position_ids,
        base=base,
        layout="bhsd",
    )
    # [/hf-after]


# [flash-before]
def flash_rotate_half(x, interleaved):
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_emb(x, cos, sin, interleaved=False, seqlen_offsets=0):
    # x: (batch, seq, heads, head_dim)
    # cos, sin: (seqlen_ro, rotary_dim / 2)
    # seqlen_offsets: an int, or (batch,): where each sequence starts
    ro_dim = cos.shape[-1] * 2
    offsets = torch.as_tensor(seqlen_offsets).reshape(-1, 1)
    positions = offsets + torch.arange(x.shape[1])  # (batch | 1, seq)
    cos, sin = cos[positions], sin[positions]
    if interleaved:
        cos = cos.repeat_interleave(2, dim=-1)
        sin = sin.repeat_interleave(2, dim=-1)
    else:
        cos = torch.cat((cos, cos), dim=-1)
        sin = torch.cat((sin, sin), dim=-1)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x_ro = x[..., :ro_dim]
    rotated = x_ro * cos + flash_rotate_half(x_ro, interleaved) * sin
    return torch.cat((rotated, x[..., ro_dim:]), dim=-1)


def flash_tables(rotary_dim, max_seqlen, base):
    steps = torch.arange(0, rotary_dim, 2, dtype=torch.float32)
    inv_freq = 1.0 / (base ** (steps / rotary_dim))
    t = torch.arange(max_seqlen, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return torch.cos(freqs), torch.sin(freqs)


def flash_before(x, rotary_dim, base, interleaved, seqlen_offsets):
    longest = int(torch.as_tensor(seqlen_offsets).max()) + x.shape[1]
    cos, sin = flash_tables(rotary_dim, longest, base)
    return apply_rotary_emb(x, cos, sin, interleaved, seqlen_offsets)
    # [/flash-before]


# [flash-after]
def flash_after(x, rotary_dim, base, interleaved, seqlen_offsets):
    if isinstance(seqlen_offsets, int):
        positions = seqlen_offsets  # every sequence starts there
    else:  # one offset per row of the batch
        positions = anyrope.Offsets(seqlen_offsets)
    return anyrope.rotate(
        x,
        positions,
        rotary_dim=rotary_dim,
        base=base,
        interleaved=interleaved,
    )
    # [/flash-after]


# [meta-before]
def precompute_freqs_cis(dim, end, theta=10000.0):
    steps = torch.arange(0, dim, 2)[: (dim // 2)].float()
    freqs = 1.0 / (theta ** (steps / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    keep = (1, x.ndim - 1)
    shape = [d if i in keep else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb_complex(xq, xk, freqs_cis):
    pairs_q = xq.float().reshape(*xq.shape[:-1], -1, 2)
    pairs_k = xk.float().reshape(*xk.shape[:-1], -1, 2)
    xq_ = torch.view_as_complex(pairs_q)
    xk_ = torch.view_as_complex(pairs_k)
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def meta_before(xq, xk, start_pos, theta):
    # xq: (batch, seq, heads, head_dim), as in Attention.forward
    seqlen, head_dim = xq.shape[1], xq.shape[-1]
    freqs_cis = precompute_freqs_cis(head_dim, 4096, theta)
    freqs_cis = freqs_cis[start_pos : start_pos + seqlen]
    return apply_rotary_emb_complex(xq, xk, freqs_cis)
    # [/meta-before]


# [meta-after]
def meta_after(xq, xk, start_pos, theta):
    return anyrope.rotate_qk(
        xq,
        xk,
        start_pos,
        base=theta,
        interleaved=True,
    )
    # [/meta-after]


def assert_agree(after, before):
    assert type(after) is type(before)
    assert after.dtype == before.dtype
    assert after.shape == before.shape
    # float32 angles in the reference code cost about position * 2**-24 radians.
    torch.testing.assert_close(after, before, rtol=1e-5, atol=2e-5)


def inputs(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


@pytest.mark.parametrize("base", [10000.0, 500000.0], ids=["base1e4", "base5e5"])
@pytest.mark.parametrize("padded", [False, True], ids=["positions", "left-padded"])
def test_hugging_face_apply_rotary_pos_emb(base, padded):
    q, k = inputs(2, 8, 11, 64), inputs(2, 2, 11, 64, seed=1)
    position_ids = torch.arange(11).expand(2, 11)
    if padded:
        position_ids = (position_ids - torch.tensor([[0], [3]])).clamp(min=0)
    for after, before in zip(
        hf_after(q, k, position_ids, base), hf_before(q, k, position_ids, base), strict=True
    ):
        assert_agree(after, before)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [32, 64], ids=["partial", "full"])
@pytest.mark.parametrize(
    "offset", [0, 37, "per-sequence"], ids=["offset0", "offset37", "offsets-per-sequence"]
)
def test_flash_attn_apply_rotary_emb(interleaved, rotary_dim, offset):
    x = inputs(2, 9, 4, 64)
    if offset == "per-sequence":
        offset = torch.tensor([5, 300])
    after = flash_after(x, rotary_dim, 10000.0, interleaved, offset)
    assert_agree(after, flash_before(x, rotary_dim, 10000.0, interleaved, offset))
    torch.testing.assert_close(after[..., rotary_dim:], x[..., rotary_dim:], rtol=0, atol=0)


def test_flash_attn_offsets_are_not_one_position_per_row():
    """The page once mapped per-sequence offsets to an array of shape (batch, 1): that
    broadcasts one position to every token of a row, which is not what flash-attn does."""
    x = inputs(2, 9, 4, 64)
    offsets = torch.tensor([5, 300])
    wrong = anyrope.rotate(x, offsets[:, None])
    right = flash_before(x, 64, 10000.0, False, offsets)
    assert (wrong - right)[:, 1:].abs().max() > 0.1
    assert_agree(flash_after(x, 64, 10000.0, False, offsets), right)


@pytest.mark.parametrize("start_pos", [0, 100], ids=["prefill", "decode-at-100"])
@pytest.mark.parametrize("theta", [10000.0, 1e6], ids=["llama2", "mistral"])
def test_meta_precompute_freqs_cis(start_pos, theta):
    xq, xk = inputs(1, 6, 8, 128), inputs(1, 6, 2, 128, seed=1)
    for after, before in zip(
        meta_after(xq, xk, start_pos, theta), meta_before(xq, xk, start_pos, theta), strict=True
    ):
        assert_agree(after, before)


def test_meta_complex_form_matches_numpy_call():
    xq, xk = inputs(1, 5, 2, 16), inputs(1, 5, 2, 16, seed=1)
    q_numpy, _ = anyrope.rotate_qk(xq.numpy(), xk.numpy(), 3, interleaved=True)
    q_torch, _ = meta_after(xq, xk, 3, 10000.0)
    np.testing.assert_array_equal(q_torch.numpy(), q_numpy)
