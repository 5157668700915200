"""Calls inside graphs: positions whose values the host never reads (traced, lazy,
captured) are gathered from tables of a fixed capacity with array-API operations, with
the bits of an eager call, and NaN rows for positions outside the tables."""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope

torch = pytest.importorskip("torch")


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("positions read on the host")


class Unreadable(torch.Tensor):
    """A positions tensor that refuses every host read, as one being captured in a CUDA
    graph must never be read."""

    item = tolist = cpu = numpy = __int__ = __index__ = __float__ = __bool__ = _refuse
    __array__ = _refuse


def unreadable(values: np.ndarray[Any, Any]) -> Any:
    return torch.from_numpy(values).as_subclass(Unreadable)


def _bits(x: Any) -> np.ndarray[Any, Any]:
    """The bits of a result (torch bfloat16 included), as unsigned integers."""
    x = torch.Tensor(x) if isinstance(x, torch.Tensor) else torch.from_numpy(x)
    return x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]).numpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
def test_positions_that_refuse_host_reads_give_the_eager_bits(dtype: str, layout: str) -> None:
    """CUDA-graph readiness, checked on the CPU: with a capacity, a positions tensor that
    raises on item, tolist, int, bool, cpu and numpy works, with the bits of the same
    positions read on the host; the tables are not rebuilt by a later call."""
    rope = anyrope.RoPE(16, rotary_dim=12, max_positions=40, interleaved=layout == "bhsd")
    rng = np.random.default_rng(0)
    shape = {"bshd": (2, 5, 3, 16), "bhsd": (2, 3, 5, 16), "sbhd": (5, 2, 3, 16)}[layout]
    q = (torch.from_numpy(rng.standard_normal(shape)) * 30).to(getattr(torch, dtype))
    positions = rng.integers(0, 40, (2, 5))
    want = rope.rotate(q, positions=torch.from_numpy(positions), layout=layout)
    got = rope.rotate(q, positions=unreadable(positions), layout=layout)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    again = rope.rotate(q, positions=unreadable(positions[:, ::-1].copy()), layout=layout)
    flipped = rope.rotate(q, positions=torch.from_numpy(positions[:, ::-1].copy()), layout=layout)
    np.testing.assert_array_equal(_bits(again), _bits(flipped))


def test_offsets_that_refuse_host_reads_give_the_eager_bits() -> None:
    """Per-row Offsets are positions too: with a capacity, never read on the host; a row
    past the tables gives NaN in its rotated features, as a position array's does."""
    rope = anyrope.RoPE(16, rotary_dim=12, max_positions=40)
    q = torch.from_numpy(np.random.default_rng(1).standard_normal((3, 5, 2, 16)))
    offsets = np.array([0, 17, 37])  # the last row: positions 37 .. 41 of 40
    want = rope.rotate(q, positions=anyrope.Offsets(torch.from_numpy(offsets)))
    got = rope.rotate(q, positions=anyrope.Offsets(unreadable(offsets)))
    np.testing.assert_array_equal(_bits(got[:2]), _bits(want[:2]))
    np.testing.assert_array_equal(_bits(got[2, :3]), _bits(want[2, :3]))
    assert np.isnan(got[2, 3:][..., :12].as_subclass(torch.Tensor).numpy()).all()


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 9),
    low=st.integers(-3, 60),
    interleaved=st.booleans(),
)
def test_out_of_range_positions_give_nan_rows(
    batch: int, seq: int, low: int, interleaved: bool
) -> None:
    """Inside a graph an out-of-range position cannot raise: its token's rotated
    features are NaN, the others have the eager bits and the unrotated ones are copied."""
    rope = anyrope.RoPE(8, rotary_dim=6, max_positions=50, interleaved=interleaved)
    rng = np.random.default_rng(seq)
    q = rng.standard_normal((batch, seq, 2, 8)).astype(np.float32)
    positions = low + rng.integers(0, 8, (batch, seq))
    got = rope.rotate(torch.from_numpy(q), positions=unreadable(positions))
    got = got.as_subclass(torch.Tensor).numpy()
    inside = (positions >= 0) & (positions < 50)
    assert np.isnan(got[~inside][..., :6]).all()
    np.testing.assert_array_equal(got[..., 6:], q[..., 6:])
    want = rope.rotate(q, positions=np.where(inside, positions, 0))
    np.testing.assert_array_equal(got[inside].view(np.int32), want[inside].view(np.int32))


def test_eager_positions_out_of_range_still_raise() -> None:
    rope = anyrope.RoPE(8, max_positions=50)
    with pytest.raises(ValueError, match="non-negative"):
        rope.rotate(np.ones((1, 2, 1, 8)), positions=np.array([0, -1]))


def test_unread_positions_need_a_capacity() -> None:
    """Without max_positions the tables have no size to gather from in the graph: a
    clear error, never a host read. A model's max_position_embeddings is no capacity: a
    model may run past it."""
    q = torch.ones((1, 3, 2, 8))
    for rope in (anyrope.RoPE(8), anyrope.RoPE(8, max_position_embeddings=16)):
        with pytest.raises(ValueError, match="build the RoPE with max_positions"):
            rope.rotate(q, positions=unreadable(np.arange(3)))


@pytest.mark.parametrize("scaling", ["dynamic", "longrope"])
def test_length_dependent_scaling_in_a_graph_names_the_limitation(scaling: str) -> None:
    settings = {"rope_type": scaling, "factor": 2.0}
    if scaling == "longrope":
        settings |= {"short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
    rope = anyrope.RoPE(8, scaling=settings, max_position_embeddings=16, max_positions=64)
    with pytest.raises(ValueError, match="largest position, which is unknown inside a graph"):
        rope.rotate(torch.ones((1, 3, 2, 8)), positions=unreadable(np.arange(3)))


def test_impl_that_reads_positions_on_the_host_refuses_unread_ones() -> None:
    rope = anyrope.RoPE(8, max_positions=16)
    with pytest.raises(ValueError, match="leaves unread"):
        rope.rotate(torch.ones((1, 3, 2, 8)), positions=unreadable(np.arange(3)), impl="blocked")


def test_tables_of_a_capacity_never_move() -> None:
    """A captured graph holds the tables' addresses: positions past the capacity get
    tables of their own instead of growing (moving) those of the capacity."""
    rope = anyrope.RoPE(8, max_positions=16)
    q = np.ones((1, 2, 1, 8), dtype=np.float32)
    rope.rotate(q, positions=np.array([0, 1]))
    (held,) = rope._source.default._tables.values()
    far = rope.rotate(q, positions=np.array([0, 300]))
    (now,) = rope._source.default._tables.values()
    assert now[0] is held[0]
    assert now[1] is held[1]
    np.testing.assert_array_equal(far, anyrope.RoPE(8).rotate(q, positions=np.array([0, 300])))


def test_tables_of_a_capacity_survive_clear_cache() -> None:
    """A captured graph holds the tables' addresses while the RoPE lives: clear_cache
    drops the rows past the capacity, not the tables of the capacity."""
    rope = anyrope.RoPE(8, max_positions=16)
    q = np.ones((1, 2, 1, 8), dtype=np.float32)
    rope.rotate(q, positions=np.array([0, 1]))
    rope.rotate(q, positions=np.array([0, 300]), inverse=True)
    (held,) = rope._source.default._tables.values()
    kept = rope._source.default.undoing
    rope.clear_cache()
    (now,) = rope._source.default._tables.values()
    assert now[0] is held[0]
    assert now[1] is held[1]
    assert rope._source.default.undoing is kept
    assert rope.cache_nbytes() > 0
    plain = anyrope.RoPE(8)
    plain.rotate(q, positions=np.array([0, 1]))
    plain.clear_cache()
    assert plain.cache_nbytes() == 0


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_ndonnx_symbolic_shapes_run_in_onnx_runtime_with_numpys_bits(
    dtype: str, interleaved: bool
) -> None:
    """An ONNX graph with symbolic batch and sequence and the positions as a graph input
    (built by ndonnx, no torch): ONNX Runtime gives NumPy's bits at every shape, and NaN
    for the tokens of out-of-range positions."""
    ndx = pytest.importorskip("ndonnx")
    ort = pytest.importorskip("onnxruntime")
    rope = anyrope.RoPE(16, rotary_dim=12, max_positions=64, interleaved=interleaved)
    q = ndx.argument(shape=("B", "S", 2, 16), dtype=getattr(ndx, dtype))
    positions = ndx.argument(shape=("B", "S"), dtype=ndx.int64)
    model = ndx.build({"q": q, "positions": positions}, {"y": rope.rotate(q, positions=positions)})
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(1)
    for batch, seq in [(1, 1), (1, 6), (3, 7)]:
        qn = (rng.standard_normal((batch, seq, 2, 16)) * 50).astype(dtype)
        pn = rng.integers(0, 64, (batch, seq))
        pn[-1, -1] = 64
        (got,) = session.run(None, {"q": qn, "positions": pn})
        inside = pn < 64
        want = rope.rotate(qn, positions=np.where(inside, pn, 0))
        np.testing.assert_array_equal(_bits(got[inside]), _bits(want[inside]))
        assert np.isnan(got[~inside][..., :12]).all()


def test_jax_traced_positions_with_a_capacity_take_no_callback() -> None:
    """Under jax.jit, positions of a RoPE with a capacity are gathered in the graph:
    no host callback in the computation, NaN rows out of range."""
    jax = pytest.importorskip("jax")
    rope = anyrope.RoPE(8, max_positions=32)
    q = np.random.default_rng(2).standard_normal((2, 3, 1, 8)).astype(np.float32)
    positions = np.array([[0, 5, 31], [2, 32, -1]])
    step = jax.jit(rope.rotate)
    assert "callback" not in str(step.lower(q, positions).as_text())
    y = np.asarray(step(q, positions))
    inside = (positions >= 0) & (positions < 32)
    assert np.isnan(y[~inside]).all()
    want = rope.rotate(q, positions=np.where(inside, positions, 0))
    # XLA may fuse the rotation into multiply-adds: one ulp (see test_jax.py).
    np.testing.assert_allclose(y[inside], want[inside], rtol=2e-7, atol=1e-7)
