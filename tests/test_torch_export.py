"""torch.export with dynamic batch and sequence dimensions.

A RoPE with a capacity (``max_positions``) exports as plain torch ops that gather rows
of its tables (constants of the graph) by the positions, inside the graph; one without
exports as the custom op ``anyrope::rotate``. Either way the exported program gives the
eager bits at shapes other than the traced ones.
"""

from __future__ import annotations

import pytest

import anyrope

torch = pytest.importorskip("torch")
export = pytest.importorskip("torch.export")

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
CAPACITY = 512
SHAPES = [(2, 5), (3, 9), (1, 1)]
"""(batch, seq): the first is traced, the others run the exported program."""


class Rotary(torch.nn.Module):
    """A model's rotary step with positions as an input, in the form ``kind`` names."""

    def __init__(self, kind: str, **options) -> None:
        super().__init__()
        self.kind = kind
        self.rope = anyrope.RoPE(16, scaling=YARN, **options)

    def forward(self, q, k, positions):
        if self.kind == "offsets":
            return self.rope(q, k, anyrope.Offsets(positions[:, 0]))
        if self.kind == "none":
            return self.rope(q, k)
        return self.rope(q, k, positions)


def _inputs(dtype, batch: int, seq: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq, 3, 16, generator=generator).to(dtype)
    k = torch.randn(batch, seq, 1, 16, generator=generator).to(dtype)
    positions = torch.randint(0, CAPACITY - seq, (batch, 1), generator=generator)
    return q, k, positions + torch.arange(seq)


def _exported(model, dtype):
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    dims = {0: batch, 1: seq}
    return torch.export.export(model, _inputs(dtype, *SHAPES[0]), dynamic_shapes=(dims, dims, dims))


@pytest.mark.parametrize("capacity", [None, CAPACITY], ids=["op", "capacity"])
@pytest.mark.parametrize("kind", ["tensor", "offsets", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_batch_and_sequence_give_eager_bits(dtype: str, kind: str, capacity) -> None:
    model = Rotary(kind, max_positions=capacity)
    program = _exported(model, DTYPES[dtype])
    ops = {node.target for node in program.graph.nodes if node.op == "call_function"}
    assert (torch.ops.anyrope.rotate.default in ops) == (capacity is None)
    for seed, shape in enumerate(SHAPES):
        inputs = _inputs(DTYPES[dtype], *shape, seed=seed)
        for got, expected in zip(program.module()(*inputs), model(*inputs), strict=True):
            assert got.shape == expected.shape
            assert torch.equal(got, expected)


@pytest.mark.parametrize("capacity", [None, CAPACITY], ids=["op", "capacity"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_xpos_exports_as_its_queries_and_keys_tables(dtype: str, capacity) -> None:
    """XPos has a table source for queries and one for keys: with a capacity both are
    gathered in plain ops (it exported as the op, which ONNX cannot take)."""
    xpos = anyrope.XPos(16, max_positions=capacity)

    class Model(torch.nn.Module):
        def forward(self, q, k, positions):
            return xpos(q, k, positions)

    program = _exported(Model(), DTYPES[dtype])
    ops = {node.target for node in program.graph.nodes if node.op == "call_function"}
    assert (torch.ops.anyrope.rotate.default in ops) == (capacity is None)
    for seed, shape in enumerate(SHAPES):
        inputs = _inputs(DTYPES[dtype], *shape, seed=seed)
        for got, expected in zip(program.module()(*inputs), xpos(*inputs), strict=True):
            assert torch.equal(got, expected)


@pytest.mark.parametrize("layout", ["bhsd", "sbhd"])
def test_other_layouts_inverse_and_partial_rotation(layout: str) -> None:
    rope = anyrope.RoPE(16, rotary_dim=8, start_index=4, interleaved=True, max_positions=CAPACITY)

    class Undo(torch.nn.Module):
        def forward(self, x, positions):
            return rope.rotate(x, positions, layout=layout, inverse=True)

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    if layout == "bhsd":
        x, other, dims = torch.randn(2, 4, 5, 16), torch.randn(3, 4, 11, 16), {0: batch, 2: seq}
    else:
        x, other, dims = torch.randn(5, 2, 4, 16), torch.randn(11, 3, 4, 16), {0: seq, 1: batch}
    program = torch.export.export(Undo(), (x, torch.arange(5)), dynamic_shapes=(dims, {0: seq}))
    positions = torch.arange(11) * 40
    assert torch.equal(program.module()(other, positions), Undo()(other, positions))


def test_positions_beyond_the_capacity_give_nan_rows() -> None:
    model = Rotary("tensor", max_positions=CAPACITY)
    program = _exported(model, torch.float32)
    q, k, positions = _inputs(torch.float32, 2, 4)
    positions[0, 1], positions[1, 3] = CAPACITY, -1
    got = program.module()(q, k, positions)
    inside = positions.clamp(0, CAPACITY - 1)
    for y, expected in zip(got, model(q, k, inside), strict=True):
        assert torch.isnan(y[0, 1]).all()
        assert torch.isnan(y[1, 3]).all()
        keep = torch.ones(2, 4, dtype=torch.bool)
        keep[0, 1] = keep[1, 3] = False
        assert torch.equal(y[keep], expected[keep])


@pytest.mark.parametrize("capacity", [None, CAPACITY], ids=["op", "capacity"])
@pytest.mark.parametrize("dtype", ["int16", "uint8", "int32"])
def test_positions_of_any_integer_dtype_give_eager_bits(dtype: str, capacity) -> None:
    """index_select takes int32 and int64 alone: narrower positions are widened in the graph."""
    model = Rotary("tensor", max_positions=capacity)

    def inputs(shape, seed):
        q, k, positions = _inputs(torch.float32, *shape, seed=seed)
        return q, k, (positions % 200).to(getattr(torch, dtype))

    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
    program = torch.export.export(model, inputs(SHAPES[0], 0), dynamic_shapes=(dims,) * 3)
    for seed, shape in enumerate(SHAPES):
        given = inputs(shape, seed)
        for got, expected in zip(program.module()(*given), model(*given), strict=True):
            assert torch.equal(got, expected)


@pytest.mark.parametrize("capacity", [None, CAPACITY], ids=["op", "capacity"])
def test_packed_sequences_without_cu_seqlens_are_refused_by_name(capacity) -> None:
    rope = anyrope.RoPE(16, max_positions=capacity)

    class Packed(torch.nn.Module):
        def forward(self, x):
            return rope.rotate(x, layout="thd")

    x = torch.randn(5, 3, 16)
    with pytest.raises(ValueError, match=r"layout='thd' needs `cu_seqlens`"):
        torch.export.export(Packed(), (x,)).module()(x)


# torch.jit.trace and TorchScript are deprecated in torch; the trace still runs.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("capacity", [None, CAPACITY], ids=["without-capacity", "capacity"])
def test_jit_trace_records_the_op_and_gives_eager_bits(capacity: int | None) -> None:
    """torch.jit.trace records torch ops only: the kernels' writes through raw memory were
    lost, and the traced module returned empty outputs."""
    rope = anyrope.RoPE(16, max_positions=capacity)

    def rotated(q, positions):
        return rope.rotate(q, positions)

    generator = torch.Generator().manual_seed(4)
    example = (torch.randn(2, 5, 3, 16, generator=generator), torch.randint(0, 200, (2, 5)))
    traced = torch.jit.trace(rotated, example, check_trace=False)
    q, positions = torch.randn(2, 5, 3, 16, generator=generator), torch.randint(0, 200, (2, 5))
    assert torch.equal(traced(q, positions), rope.rotate(q, positions))
