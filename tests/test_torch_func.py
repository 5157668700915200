"""anyrope under ``torch.func``: ``vmap`` maps the custom op ``anyrope::rotate`` (its
batching rule makes the mapped axis one more batch axis), with the bits of one call per
item; ``grad``, ``vmap(grad)``, ``jvp`` and forward mode go through autograd as eager
calls do."""

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


@pytest.mark.parametrize("kind", ["none", "batch-seq", "offsets", "mapped-seq"])
@pytest.mark.parametrize("layout", list(SHAPES))
def test_vmap_in_place_writes_the_bits_of_a_call_per_item(layout: str, kind: str) -> None:
    rope = anyrope.RoPE(16, rotary_dim=12, start_index=2)
    q, k = _inputs(layout)
    mapped = kind.startswith("mapped")
    positions = _mapped_positions("seq") if mapped else _positions(kind)
    q2, k2 = q.clone(), k.clone()

    def one(a, b, p):
        return rope(a, b, p, layout=layout, inplace=True)

    torch.func.vmap(one, in_dims=(0, 0, 0 if mapped else None))(q2, k2, positions)
    for i in range(ITEMS):
        expected = rope(q[i], k[i], positions[i] if mapped else positions, layout=layout)
        assert torch.equal(q2[i], expected[0])
        assert torch.equal(k2[i], expected[1])


def test_vmap_in_place_of_an_unmapped_array_is_refused_by_name() -> None:
    rope = anyrope.RoPE(16)
    q, _ = _inputs("bshd")
    k = torch.randn(2, 5, 1, 16)
    with pytest.raises(ValueError, match=r"`inplace`=True under torch.func.vmap needs `k`"):
        torch.func.vmap(lambda a: rope(a, k, 3, inplace=True))(q)


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


# Forward mode's first use in a process loads torch's own scripted decompositions.
_FORWARD_MODE = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


@_FORWARD_MODE
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
@pytest.mark.parametrize("impl", ["auto", "array_api"])
def test_forward_mode_turns_the_tangent_by_the_rotation(impl: str, inplace: bool) -> None:
    """The derivative of a rotation along a tangent is the rotated tangent. The paths that
    write through raw memory dropped a dual tensor's tangent without a word, and failed
    on ``torch.func.jvp``'s tensors."""
    import torch.autograd.forward_ad as fwad

    rope = anyrope.RoPE(16, rotary_dim=12, interleaved=True)
    positions = torch.arange(5) + 3
    x, tangent = (a[0] for a in _inputs("bshd"))
    want, turned = rope.rotate(x, positions), rope.rotate(tangent, positions)

    def rotated(a):
        return rope.rotate(a.clone() if inplace else a, positions, impl=impl, inplace=inplace)

    with fwad.dual_level():
        primal, got = fwad.unpack_dual(rotated(fwad.make_dual(x, tangent)))
    assert torch.equal(primal, want)
    assert got is not None
    assert torch.equal(got, turned)
    primal, got = torch.func.jvp(rotated, (x,), (tangent,))
    assert torch.equal(primal, want)
    assert torch.equal(got, turned)


@_FORWARD_MODE
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_jacobians_both_ways_are_the_rotation_matrix(inplace: bool) -> None:
    rope = anyrope.RoPE(4)
    x = torch.randn(1, 3, 1, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def rotated(a):
        return rope.rotate(a.clone() if inplace else a, 5, inplace=inplace)

    # Column j of the Jacobian is the rotation of the j-th unit vector.
    units = torch.eye(x.numel(), dtype=torch.float64).reshape(-1, *x.shape)
    matrix = torch.stack([rope.rotate(u, 5) for u in units], dim=-1).reshape(*x.shape, *x.shape)
    assert torch.equal(torch.func.jacfwd(rotated)(x), matrix)
    assert torch.equal(torch.func.jacrev(rotated)(x), matrix)


@_FORWARD_MODE
@pytest.mark.parametrize("transform", ["grad", "jvp"])
def test_tables_first_built_inside_a_transform_are_plain_tensors(transform: str) -> None:
    """Tables built inside ``torch.func.grad`` or ``jvp`` are kept for later calls: they
    must not be the transform's wrappers, which hold no memory a kernel could read."""
    rope = anyrope.RoPE(16, base=12345.0)
    x, tangent = (a[0] for a in _inputs("bshd"))
    if transform == "grad":
        torch.func.grad(lambda a: rope.rotate(a, 7).sum())(x)
    else:
        torch.func.jvp(lambda a: rope.rotate(a, 7), (x,), (tangent,))
    kept = [
        table
        for held in rope._source.default._tables.values()
        for table in held[:2]
        if isinstance(table, torch.Tensor)
    ]
    assert kept
    assert not any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in kept)


@_FORWARD_MODE
@pytest.mark.parametrize("impl", ["blocked", "numba"])
def test_a_host_path_asked_for_in_forward_mode_is_refused_by_name(impl: str) -> None:
    import torch.autograd.forward_ad as fwad

    if impl == "numba":
        pytest.importorskip("numba")
    x, tangent = (a[0] for a in _inputs("bshd"))
    with fwad.dual_level(), pytest.raises(ValueError, match=r"does not record autograd"):
        anyrope.RoPE(16).rotate(fwad.make_dual(x, tangent), impl=impl)


@pytest.mark.parametrize(
    "kind", ["past-capacity", "far", "offsets-far", "made-inside"], ids=lambda kind: kind
)
def test_grad_with_positions_past_the_cached_tables(kind: str) -> None:
    """Positions the cached tables do not hold are read on the host, where ``torch.func``
    wrapped even a detached tensor (it failed on a missing data pointer)."""
    rope = anyrope.RoPE(16, max_positions=64 if kind == "past-capacity" else None)
    x, weights = (a[0].double() for a in _inputs("bshd"))
    far = torch.tensor([5, 100, 3_000_000, 7, 9])

    def positions():
        if kind == "offsets-far":
            return anyrope.Offsets(torch.tensor([2_000_000, 9]))
        if kind == "made-inside":
            return torch.arange(5) * 700_001
        return torch.tensor([5, 100, 300, 7, 9]) if kind == "past-capacity" else far

    grad = torch.func.grad(lambda a: (rope.rotate(a, positions()) * weights).sum())(x)
    assert torch.equal(grad, rope.rotate(weights, positions(), inverse=True))


@pytest.mark.parametrize("kind", ["positions", "offsets"])
def test_positions_mapped_around_grad_are_refused_by_name(kind: str) -> None:
    """vmap(grad(f)) with positions the vmap maps: their values cannot be read on the
    host (it failed inside functorch, on a tensor that "may have escaped")."""
    rope = anyrope.RoPE(16)
    x, weights = (a[:, 0] for a in _inputs("bshd"))
    positions = torch.randint(0, 100, (ITEMS, 5)) if kind == "positions" else torch.arange(4)

    def loss(a, w, p):
        where = anyrope.Offsets(p[None]) if kind == "offsets" else p[None]
        return (rope.rotate(a[None], where) * w[None]).sum()

    with pytest.raises(ValueError, match=r"`positions` that torch.func.vmap maps cannot be"):
        torch.func.vmap(torch.func.grad(loss))(x, weights, positions)
