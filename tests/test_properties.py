"""Properties of rotations (RoFormer), checked on random shapes, positions and widths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def rope_inputs(draw):
    half = draw(st.integers(1, 24))
    head_dim = 2 * half
    rotary_dim = 2 * draw(st.integers(1, half))
    batch = draw(st.integers(1, 3))
    seq = draw(st.integers(1, 9))
    heads = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    layout = draw(st.sampled_from(["bshd", "bhsd", "sbhd"]))
    interleaved = draw(st.booleans())
    base = draw(st.sampled_from([10000.0, 500000.0, 1e6, 37.5]))
    rng = np.random.default_rng(seed)
    positions = rng.integers(0, draw(st.sampled_from([10, 5000, 2**24])), size=(batch, seq))
    x = rng.standard_normal((batch, seq, heads, head_dim))
    return (
        x,
        positions,
        {"rotary_dim": rotary_dim, "interleaved": interleaved, "base": base},
        layout,
    )


def _to_layout(x, layout):
    return {"bshd": x, "bhsd": np.swapaxes(x, 1, 2), "sbhd": np.moveaxis(x, 1, 0)}[layout]


@SETTINGS
@given(rope_inputs())
def test_layouts_give_the_same_bits(inputs):
    x, positions, options, layout = inputs
    reference = anyrope.rotate(x, positions, **options)
    got = anyrope.rotate(
        np.ascontiguousarray(_to_layout(x, layout)), positions, layout=layout, **options
    )
    np.testing.assert_array_equal(got, _to_layout(reference, layout))


@SETTINGS
@given(rope_inputs())
def test_norms_preserved_and_inverse_undoes(inputs):
    x, positions, options, _ = inputs
    y = anyrope.rotate(x, positions, **options)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    back = anyrope.rotate(y, positions, inverse=True, **options)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-12 * np.abs(x).max() + 1e-300)


@SETTINGS
@given(rope_inputs(), st.integers(0, 10**6))
def test_scores_depend_only_on_relative_position(inputs, shift):
    x, positions, options, _ = inputs
    q, k = x, x[..., ::-1, :].copy()
    q1, k1 = anyrope.rotate_qk(q, k, positions, **options)
    q2, k2 = anyrope.rotate_qk(q, k, positions + shift, **options)
    scores1 = np.einsum("bshd,bthd->bhst", q1, k1)
    scores2 = np.einsum("bshd,bthd->bhst", q2, k2)
    np.testing.assert_allclose(scores1, scores2, rtol=1e-7, atol=1e-7)


@SETTINGS
@given(rope_inputs())
def test_half_split_and_interleaved_agree_after_a_permutation(inputs):
    x, positions, options, _ = inputs
    r = options["rotary_dim"]
    # feature order that moves interleaved pairs (2i, 2i+1) to half-split slots (i, i + r/2)
    permutation = np.concatenate(
        [np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, x.shape[-1])]
    )
    options = {**options, "interleaved": True}
    interleaved = anyrope.rotate(x, positions, **options)
    half = anyrope.rotate(x[..., permutation], positions, **{**options, "interleaved": False})
    np.testing.assert_array_equal(half, interleaved[..., permutation])


@SETTINGS
@given(rope_inputs())
def test_pass_through_is_copied_bit_for_bit(inputs):
    x, positions, options, _ = inputs
    x32 = x.astype(np.float32)
    y = anyrope.rotate(x32, positions, **options)
    r = options["rotary_dim"]
    np.testing.assert_array_equal(y[..., r:].view(np.uint32), x32[..., r:].view(np.uint32))


@SETTINGS
@given(rope_inputs())
def test_broadcast_positions_equal_explicit_ones(inputs):
    x, positions, options, _ = inputs
    row = positions[:1]
    explicit = np.broadcast_to(row, positions.shape).copy()
    np.testing.assert_array_equal(
        anyrope.rotate(x, row, **options), anyrope.rotate(x, explicit, **options)
    )
    np.testing.assert_array_equal(
        anyrope.rotate(x, row[0], **options), anyrope.rotate(x, explicit, **options)
    )
