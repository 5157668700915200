"""anyrope inside ``torch.compile(fullgraph=True)``: the custom op ``anyrope::rotate``.

Under compilation, RoPE and the functional API hand torch tensors to the op, whose real
kernel is the eager pipeline: the compiled result must equal the eager one bit for bit
(the op is opaque to inductor), forward and backward, with no graph break and no
warning (pytest turns warnings into errors). Eager calls must not touch the op.

Compiles are few and small (the CI machine has two cores): the matrix runs on the
``aot_eager`` backend (Dynamo, fake tensors, functionalization and the autograd split,
without code generation); one model goes through inductor.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope import _torch_op as torch_op

torch = pytest.importorskip("torch")
dynamo_testing = pytest.importorskip("torch._dynamo.testing")

with warnings.catch_warnings():
    # torch's own modules warn while inductor is imported (deprecations inside torch);
    # imported here, once, so that only anyrope's part of a compile runs under "error".
    warnings.simplefilter("ignore")
    import torch._inductor.compile_fx

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
"""A scaling whose attention factor is not 1: the backward must multiply by it too."""


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def _qk(dtype: torch.dtype, *, seq: int = 5, grad: bool = False, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, seq, 3, 16, generator=generator).to(dtype)
    k = torch.randn(2, seq, 1, 16, generator=generator).to(dtype)
    return q.requires_grad_(grad), k.requires_grad_(grad)


def _compiled(fn, backend: str = "aot_eager"):
    counter = dynamo_testing.CompileCounterWithBackend(backend)
    return torch.compile(fn, fullgraph=True, backend=counter), counter


def _assert_equal(got, expected) -> None:
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype
        assert a.shape == b.shape
        assert torch.equal(a, b)


POSITIONS = {
    "none": lambda: None,
    "offset": lambda: 7,
    "tensor": lambda: torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]),
    "offsets": lambda: anyrope.Offsets(torch.tensor([11, 0])),
}


class Attention(torch.nn.Module):
    """A model's rotary step: the three position forms a decoder meets."""

    def __init__(self) -> None:
        super().__init__()
        self.rope = anyrope.RoPE(16, scaling=YARN)

    def forward(self, q, k, offset: int, positions, cached):
        a = self.rope(q, k, offset)
        b = self.rope(q, k, positions)
        c = self.rope(q, k, anyrope.Offsets(cached))  # built inside the compiled code
        return (*a, *b, *c)


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_compiles_with_inductor_bit_for_bit(dtype: str) -> None:
    model = Attention()
    q, k = _qk(DTYPES[dtype])
    args = (q, k, 3, torch.arange(5).expand(2, 5), torch.tensor([2, 40]))
    compiled, counter = _compiled(model, backend="inductor")
    _assert_equal(compiled(*args), model(*args))
    assert counter.frame_count == 1


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_and_backward_equal_eager(dtype: str, positions: str) -> None:
    rope = anyrope.RoPE(16, scaling=YARN)
    q, k = _qk(DTYPES[dtype], grad=True)
    where = POSITIONS[positions]()
    compiled, counter = _compiled(lambda q, k: rope(q, k, where))
    got, expected = compiled(q, k), rope(q, k, where)
    _assert_equal(got, expected)
    grads = tuple(torch.randn_like(y) for y in expected)
    _assert_equal(
        torch.autograd.grad(got, (q, k), grads), torch.autograd.grad(expected, (q, k), grads)
    )
    assert counter.frame_count == 1


def test_no_graph_break_reported() -> None:
    rope = anyrope.RoPE(16)
    q, k = _qk(torch.float32)
    explained = torch._dynamo.explain(rope)(q, k, torch.arange(5))
    assert explained.graph_break_count == 0
    assert explained.graph_count == 1


def test_adjoint_is_the_transpose_with_the_attention_factor() -> None:
    """<M x, g> == <x, M^T g>: the backward is the adjoint, whatever ``inverse`` means."""
    rope = anyrope.RoPE(16, scaling=YARN)
    assert rope.attention_factor != 1.0
    x, _ = _qk(torch.float64, seed=1)
    g, _ = _qk(torch.float64, seed=2)
    for inverse in (False, True):
        compiled, _ = _compiled(lambda x, inverse=inverse: rope.rotate(x, 9, inverse=inverse))
        leaf = x.clone().requires_grad_(True)
        y = compiled(leaf)
        (adjoint_g,) = torch.autograd.grad(y, leaf, g)
        torch.testing.assert_close(
            torch.sum(y.detach() * g), torch.sum(x * adjoint_g), rtol=1e-13, atol=0
        )


def test_double_backward_goes_through_the_op() -> None:
    rope = anyrope.RoPE(16)
    x = torch.randn(1, 4, 2, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: rope.rotate(t, 3, impl="array_api"), (x,))
    torch_op.compiling(x)  # the op, called directly below, is defined on first use
    torch_op._define_ops()
    options = _options(rope, head_dim=16, offset=3)
    assert torch.autograd.gradgradcheck(
        lambda t: torch.ops.anyrope.rotate([t], None, None, adjoint=False, **options)[0], (x,)
    )


def _options(rope: anyrope.RoPE, *, head_dim: int, offset: int = 0, **changes) -> dict:
    return {
        "keys": [rope._op_keys[0]],
        "offset": offset,
        "per_row": False,
        "head_dim": head_dim,
        "interleaved": rope.interleaved,
        "layout": "bshd",
        "inverse": False,
        "impl": "auto",
        **changes,
    }


@pytest.mark.parametrize(
    "case", ["tensor", "offsets", "interleaved-inverse", "thd", "inplace", "array_api"]
)
def test_opcheck(case: str) -> None:
    """torch.library.opcheck: schema, fake kernel, autograd registration, dispatch."""
    torch_op._define_ops()
    rope = anyrope.RoPE(16, interleaved=case == "interleaved-inverse")
    q, k = _qk(torch.float32)
    options = _options(rope, head_dim=16)
    positions = None
    cu_seqlens = None
    arrays = [q, k]
    if case == "tensor":
        positions = torch.arange(5)
    elif case == "offsets":
        positions, options["per_row"] = torch.tensor([4, 1]), True
    elif case == "interleaved-inverse":
        options.update(offset=12, inverse=True)
    elif case == "thd":
        arrays = [q.reshape(10, 3, 16), k.reshape(10, 1, 16)]
        cu_seqlens, options["layout"] = torch.tensor([0, 4, 10], dtype=torch.int32), "thd"
    elif case == "array_api":
        options["impl"] = "array_api"
    if case == "inplace":
        torch.library.opcheck(torch.ops.anyrope.rotate_.default, (arrays, None, None), options)
        return
    args = (arrays, positions, cu_seqlens)
    torch.library.opcheck(torch.ops.anyrope.rotate.default, args, {**options, "adjoint": False})
    torch.library.opcheck(torch.ops.anyrope.rotate.default, args, {**options, "adjoint": True})


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 6),
    offset=st.integers(0, 5000),
    interleaved=st.booleans(),
    rotary_dim=st.sampled_from([None, 4, 8]),
    per_row=st.booleans(),
)
def test_op_kernel_equals_eager(  # noqa: PLR0917 - hypothesis's arguments
    batch, seq, offset, interleaved, rotary_dim, per_row
) -> None:
    """The op's kernel (what compiled code runs) against an eager call: the same bits."""
    torch_op._define_ops()
    rope = anyrope.RoPE(8, rotary_dim=rotary_dim, interleaved=interleaved)
    x = torch.randn(batch, seq, 2, 8)
    if per_row:
        values = torch.arange(batch) * 7 + offset
        expected = rope.rotate(x, anyrope.Offsets(values))
        options = _options(rope, head_dim=8, per_row=True)
        (got,) = torch.ops.anyrope.rotate([x], values, None, adjoint=False, **options)
    else:
        expected = rope.rotate(x, offset)
        options = _options(rope, head_dim=8, offset=offset)
        (got,) = torch.ops.anyrope.rotate([x], None, None, adjoint=False, **options)
    assert torch.equal(got, expected)


def test_functional_api_compiles() -> None:
    def model(q, k, qkv, positions):
        q2, k2 = anyrope.rotate_qk(q, k, positions, scaling={"rope_type": "linear", "factor": 2.0})
        x = anyrope.rotate(q, 4, interleaved=True)
        fused = anyrope.rotate_qkv(qkv, anyrope.Offsets(positions[:, 0]), num_heads_q=2)
        return q2, k2, x, fused

    q, k = _qk(torch.float32)
    qkv = torch.randn(2, 5, 4, 16)
    positions = torch.arange(10).reshape(2, 5)
    compiled, counter = _compiled(model)
    _assert_equal(compiled(q, k, qkv, positions), model(q, k, qkv, positions))
    anyrope.clear_cache()  # frees the tables; the compiled code rebuilds them
    assert anyrope.cache_nbytes() == 0
    _assert_equal(compiled(q, k, qkv, positions), model(q, k, qkv, positions))
    assert counter.frame_count == 1


def test_inplace_start_index_and_fused_qkv() -> None:
    rope = anyrope.RoPE(16, rotary_dim=8, start_index=4)

    def model(q, k, qkv):
        rope(q, k, 3, inplace=True)
        return rope.rotate_qkv(qkv, 5), rope(q, k, torch.arange(5))

    q, k = _qk(torch.float32)
    qkv = torch.randn(2, 5, 3, 2, 16)
    eager_q, eager_k = q.clone(), k.clone()
    compiled, counter = _compiled(model)
    got, expected = compiled(q, k, qkv), model(eager_q, eager_k, qkv)
    _assert_equal((q, k), (eager_q, eager_k))
    assert torch.equal(got[0], expected[0])
    _assert_equal(got[1], expected[1])
    assert counter.frame_count == 1


def test_inplace_with_grad_is_recorded_by_autograd() -> None:
    rope = anyrope.RoPE(16)
    leaf, _ = _qk(torch.float32, grad=True)

    def model(x):
        y = x * 2.0
        rope.rotate(y, 3, inplace=True)
        return y

    compiled, _ = _compiled(model)
    g = torch.randn_like(leaf)
    (got,) = torch.autograd.grad(compiled(leaf), leaf, g)
    (expected,) = torch.autograd.grad(model(leaf), leaf, g)
    assert torch.equal(got, expected)


def test_mrope_positions_compile() -> None:
    rope = anyrope.RoPE(16, scaling={"rope_type": "default", "mrope_section": [2, 3, 3]})
    q, k = _qk(torch.float32)
    positions = torch.stack([torch.arange(5).expand(2, 5) + i for i in range(3)])
    compiled, _ = _compiled(rope)
    _assert_equal(compiled(q, k, positions), rope(q, k, positions))


def test_decode_offsets_compile_at_most_twice() -> None:
    """A 64-step decode loop with default settings: the int offset becomes dynamic after
    one recompile, not one per token."""
    rope = anyrope.RoPE(16)
    q, k = _qk(torch.float32, seq=1)
    compiled = torch.compile(rope)
    for position in range(100, 164):
        _assert_equal(compiled(q, k, position), rope(q, k, position))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2


DYNAMIC_CALLS = {
    "rope-none": lambda rope, q, k: rope(q, k),
    "rope-offset": lambda rope, q, k: rope(q, k, 7),
    "rope-tensor": lambda rope, q, k: rope(q, k, torch.arange(q.shape[1]) * 2),
    "rope-offsets": lambda rope, q, k: rope(q, k, anyrope.Offsets(torch.tensor([3, 40]))),
    "functional": lambda rope, q, k: anyrope.rotate_qk(q, k, 5, interleaved=True),
}


@pytest.mark.parametrize("call", DYNAMIC_CALLS)
def test_dynamic_compiles_once_for_any_sequence_length(call: str) -> None:
    """No size of the batch or sequence is read while tracing: one graph, no break."""
    rope = anyrope.RoPE(16, scaling=YARN)
    fn = DYNAMIC_CALLS[call]
    compiled = torch.compile(
        lambda q, k: fn(rope, q, k), dynamic=True, fullgraph=True, backend="aot_eager"
    )
    for seq in (5, 8, 13, 2):  # 1 would be specialized by torch itself
        q, k = _qk(torch.float32, seq=seq)
        _assert_equal(compiled(q, k), fn(rope, q, k))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_a_rope_built_inside_compiled_code() -> None:
    def model(q, k):
        rope = anyrope.RoPE(16, scaling=YARN, max_positions=64)
        return rope(q, k, 3)

    q, k = _qk(torch.float32)
    compiled, counter = _compiled(model)
    _assert_equal(compiled(q, k), model(q, k))
    _assert_equal(compiled(q, k), model(q, k))
    assert counter.frame_count == 1


@pytest.mark.parametrize("kind", ["RoPE", "XPos"])
def test_a_rope_built_inside_compiled_code_from_symbolic_settings(kind: str) -> None:
    """Dynamo makes numbers symbolic (dynamic=True, or a second value of an argument):
    the settings of a RoPE made inside the compiled code are specialized (it failed). An
    XPos made there traces without a break (it failed on its second table source)."""
    make = anyrope.RoPE if kind == "RoPE" else anyrope.XPos

    def model(q, k, base):
        return make(q.shape[-1], base=base)(q, k, 3)

    for dynamic in (True, None):
        torch._dynamo.reset()
        compiled = torch.compile(model, dynamic=dynamic, fullgraph=True, backend="aot_eager")
        for base in (10000.0, 500.0):
            q, k = _qk(torch.float32)
            _assert_equal(compiled(q, k, base), model(q, k, base))


def test_meta_tensors_give_meta_results() -> None:
    rope = anyrope.RoPE(16, rotary_dim=8, start_index=4)
    q = torch.empty(2, 5, 3, 16, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 5, 1, 16, device="meta", dtype=torch.bfloat16)
    results = (
        *rope(q, k, torch.arange(5, device="meta")),
        rope.rotate(q, 3, layout="bhsd"),
        rope.rotate_qkv(torch.empty(2, 5, 5, 16, device="meta"), num_heads_q=3),
        *anyrope.rotate_qk(q, k, anyrope.Offsets(torch.empty(2, dtype=torch.int64, device="meta"))),
        rope.rotate(q, inplace=True),
    )
    for y, like in zip(results, (q, k, q, torch.empty(2, 5, 5, 16), q, k, q), strict=True):
        assert y.device.type == "meta"
        assert (y.shape, y.dtype) == (like.shape, like.dtype)
    with pytest.raises(ValueError, match="batch and sequence"):
        rope(q, k[:, :4])
    with pytest.raises(ValueError, match="head_dim=16"):
        rope.rotate(q[..., :8])


def test_errors_under_compile() -> None:
    rope = anyrope.RoPE(16)
    q, k = _qk(torch.float32)
    negative, _ = _compiled(rope)
    with pytest.raises(ValueError, match="positions"):  # checked when the op runs
        negative(q, k, torch.tensor([0, 1, -2, 3, 4]))
    narrow = anyrope.RoPE(8)
    wrong, _ = _compiled(lambda q: narrow(q, q))
    with pytest.raises(Exception, match="head_dim=8"):  # the fake kernel's checks
        wrong(q)
    with pytest.raises(Exception, match="xp"):
        _compiled(lambda q, k: rope(q, k, xp=np))[0](q, k)
    # 1 and 0 are refused as eagerly, though the op's schema would take them for bools.
    with pytest.raises(Exception, match="`inverse` must be True or False; got 1"):
        _compiled(lambda q, k: rope(q, k, inverse=1))[0](q, k)
    with pytest.raises(Exception, match="`inplace` must be True or False; got 0"):
        _compiled(lambda q: anyrope.rotate(q, inplace=0))[0](q)
    with pytest.raises(Exception, match="positions"):
        _compiled(lambda q, k: rope(q, k, [0, 1, 2, 3, 4]))[0](q, k)


def test_a_dead_rope_is_named() -> None:
    torch_op._define_ops()
    key = anyrope.RoPE(16)._op_keys[0]
    gc.collect()
    q, _ = _qk(torch.float32)
    options = {**_options(anyrope.RoPE(16), head_dim=16), "keys": [key]}
    with pytest.raises(RuntimeError, match="no longer exists"):
        torch.ops.anyrope.rotate([q], None, None, adjoint=False, **options)


def test_eager_calls_do_not_use_the_op(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("an eager call went through the custom op")

    monkeypatch.setattr(torch_op, "rotate", refuse)
    rope = anyrope.RoPE(16)
    q, k = _qk(torch.float32)
    rope(q, k, 3)
    rope.rotate(q, torch.arange(5))
    rope.rotate_qkv(torch.randn(2, 5, 3, 2, 16))
    anyrope.rotate_qk(q, k, anyrope.Offsets(torch.tensor([1, 2])))
    assert not torch_op.compiling(q)
