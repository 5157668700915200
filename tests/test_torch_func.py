"""anyrope under ``torch.func``: ``vmap`` maps the custom op ``anyrope::rotate`` (its
batching rule makes the mapped axis one more batch axis), with the bits of one call per
item; ``grad`` and ``vmap(grad)`` go through autograd as eager calls do."""

from __future__ import annotations

import pytest

import anyrope

torch = pytest.importorskip("torch")

ITEMS = 4
SHAPES = {"bshd": (2, 5, 3, 16), "bhsd": (2, 3, 5, 16), "sbhd": (5, 2, 3, 16)}


def _positions(kind: str):
    """Positions of every item (the same for all), in the form ``kind`` names."""
    generator = torch.Generator().manual_seed(1)
    return {
        "none": None,
        "int": 7,
        "batch-seq": torch.randint(0, 100, (2, 5), generator=generator),
        "seq": torch.arange(5) + 3,
        "offsets": anyrope.Offsets(torch.tensor([4, 9])),
    }[kind]


def _mapped_positions(kind: str):
    """Positions of each item (the mapped axis first), in the form ``kind`` names."""
    generator = torch.Generator().manual_seed(2)
    return {
        "batch-seq": torch.randint(0, 100, (ITEMS, 2, 5), generator=generator),
        "seq": torch.randint(0, 100, (ITEMS, 5), generator=generator),
        "offset": torch.tensor([1, 5, 9, 30]),
        "offsets": torch.tensor([[1, 2], [3, 4], [5, 6], [70, 8]]),
    }[kind]


def _inputs(layout: str):
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(ITEMS, *SHAPES[layout], generator=generator) for _ in range(2))


@pytest.mark.parametrize("kind", ["none", "int", "batch-seq", "seq", "offsets"])
@pytest.mark.parametrize("layout", list(SHAPES))
def test_vmap_gives_the_bits_of_a_call_per_item(layout: str, kind: str) -> None:
    rope = anyrope.RoPE(16, rotary_dim=12, start_index=2)
    q, k = _inputs(layout)
    positions = _positions(kind)
    got = torch.func.vmap(lambda a, b: rope(a, b, positions, layout=layout))(q, k)
    for i in range(ITEMS):
        for mapped, one in zip(got, rope(q[i], k[i], positions, layout=layout), strict=True):
            assert torch.equal(mapped[i], one)


@pytest.mark.parametrize("kind", ["batch-seq", "seq", "offset", "offsets"])
@pytest.mark.parametrize("layout", list(SHAPES))
def test_vmap_over_positions_gives_each_item_its_own(layout: str, kind: str) -> None:
    rope = anyrope.RoPE(16)
    q, _ = _inputs(layout)
    positions = _mapped_positions(kind)

    def one(x, p):
        return rope.rotate(x, anyrope.Offsets(p) if kind == "offsets" else p, layout=layout)

    got = torch.func.vmap(one)(q, positions)
    for i in range(ITEMS):
        assert torch.equal(got[i], one(q[i], positions[i]))


def test_vmap_over_another_axis_and_unmapped_arrays() -> None:
    rope = anyrope.RoPE(16)
    q, _ = _inputs("bshd")
    k = torch.randn(2, 5, 1, 16)
    got = torch.func.vmap(lambda a: rope(a, k, 3), in_dims=1)(q.movedim(0, 1))
    for i in range(ITEMS):
        expected = rope(q[i], k, 3)
        assert torch.equal(got[0][i], expected[0])
        assert torch.equal(got[1][i], expected[1])


def test_vmap_of_grad_and_grad_are_the_transposed_rotation() -> None:
    rope = anyrope.RoPE(16)
    q, weights = _inputs("bshd")
    grads = torch.func.vmap(torch.func.grad(lambda a, w: (rope.rotate(a, 3) * w).sum()))(q, weights)
    for i in range(ITEMS):
        assert torch.allclose(grads[i], rope.rotate(weights[i], 3, inverse=True), atol=1e-6)


def test_vmap_of_packed_sequences_is_refused_by_name() -> None:
    rope = anyrope.RoPE(16)
    x = torch.randn(ITEMS, 6, 2, 16)
    lengths = torch.tensor([0, 2, 6])
    with pytest.raises(ValueError, match=r"torch.func.vmap maps layouts 'bshd', 'bhsd' and"):
        torch.func.vmap(lambda a: rope.rotate(a, layout="thd", cu_seqlens=lengths))(x)
