"""Decode steps with a positions array, as Hugging Face passes ``position_ids``.

A call whose geometry was seen before checks only the values of its positions. An array
that holds one range in every row (a decode step's ``(B, 1)`` position_ids, a prefill's
``arange``) then takes the route of an int offset, and rows at positions of their own
are gathered with NumPy: the per-call work of an int offset, plus the reading of a few
integers. The host work is counted in Python function calls, which do not depend on
the machine's load; the timings are in ``benchmarks/bench_decode.py``.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope._paths import PATHS
from anyrope._validation import MAX_POSITION

LIBRARIES = ["numpy", "torch"]
HOST_PATHS = [
    pytest.param(
        "numba",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("numba") is None, reason="numba is not installed"
        ),
    ),
    "blocked",
]
SETTINGS = settings(max_examples=25, deadline=None)


def _library(name: str) -> Callable[[np.ndarray], Any]:
    """NumPy arrays, or torch CPU tensors made from them."""
    if name == "numpy":
        return np.array
    torch = pytest.importorskip("torch")
    return lambda a: torch.from_numpy(np.array(a))


def _decode_inputs(library: str, batch: int) -> tuple[Any, Any, Callable[[np.ndarray], Any]]:
    as_array = _library(library)
    rng = np.random.default_rng(batch)
    q = as_array(rng.standard_normal((batch, 1, 4, 16)).astype(np.float32))
    k = as_array(rng.standard_normal((batch, 1, 2, 16)).astype(np.float32))
    return q, k, as_array


def _cast(a: Any, dtype: str) -> Any:
    if isinstance(a, np.ndarray):
        return a.astype(dtype)
    import torch

    return a.to(getattr(torch, dtype))


def _bits(x: Any) -> np.ndarray:
    """The bits of a NumPy array or torch tensor, as integers (bfloat16 included)."""
    if not isinstance(x, np.ndarray):
        import torch

        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
        return x.contiguous().view(view).numpy().copy()
    return x.view({2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]).copy()


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("impl", [*HOST_PATHS, "array_api"])
@pytest.mark.parametrize(
    "geometry",
    [(1, 1, "bshd"), (32, 1, "bshd"), (3, 1, "bhsd"), (1, 5, "bshd"), (2, 5, "sbhd")],
    ids=["B1-decode", "B32-decode", "bhsd", "prefill", "sbhd"],
)
def test_positions_holding_one_range_take_the_route_of_an_int_offset(
    library: str, impl: str, geometry: tuple[int, int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    batch, seq, layout = geometry
    as_array = _library(library)
    shape = {"bshd": (batch, seq, 2, 8), "bhsd": (batch, 2, seq, 8), "sbhd": (seq, batch, 2, 8)}
    x = as_array(np.ones(shape[layout], np.float32))
    ids = np.broadcast_to(1000 + np.arange(seq), (batch, seq)).copy()  # every row: 1000..
    if seq > 1:
        ids = ids[:1]  # a prefill's (1, seq)
    path = PATHS[impl]
    seen: list[Any] = []
    run = path.run
    monkeypatch.setattr(path, "run", lambda plan: seen.append(plan.where) or run(plan))
    rope = anyrope.RoPE(8)
    rope.rotate(x, as_array(ids + 1), layout=layout, impl=impl)  # plans the geometry
    got = rope.rotate(x, as_array(ids), layout=layout, impl=impl)
    want = rope.rotate(x, 1000, layout=layout, impl=impl)
    assert seen[1] == seen[2]
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _python_calls(*fns: Callable[[], object]) -> list[int]:
    """Python function calls (frames) made by one call of each of ``fns``, counted after
    two calls of every one (plans, tables and lazy imports are then in place)."""
    for fn in fns * 2:
        fn()
    counts = []
    for fn in fns:
        calls = 0

        def count(frame: Any, event: str, arg: Any) -> None:
            nonlocal calls
            calls += event == "call"

        gc.disable()  # a collection would count the finalizers it runs
        sys.setprofile(count)
        try:
            fn()
        finally:
            sys.setprofile(None)
            gc.enable()
        counts.append(calls)
    return counts


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("impl", HOST_PATHS)
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("rows", ["same", "apart"])
def test_a_decode_step_with_position_ids_costs_about_the_calls_of_an_int_offset(
    library: str, impl: str, batch: int, rows: str
) -> None:
    q, k, as_array = _decode_inputs(library, batch)
    ids = np.full((batch, 1), 1000, np.int64)
    if rows == "apart":
        ids += 7 * np.arange(batch)[:, None]
    ids = as_array(ids)
    rope = anyrope.RoPE(16)
    offset, array = _python_calls(
        lambda: rope(q, k, positions=1000, impl=impl), lambda: rope(q, k, positions=ids, impl=impl)
    )
    # Reading the positions' geometry and values, and for rows apart two takes: about
    # ten functions. Min and max through NumPy's and torch's Python wrappers, and the
    # generic gather, made 19 to 45 more calls than the int offset.
    assert array <= offset + 15, (array, offset)


@st.composite
def _positions(draw: Any) -> dict[str, Any]:
    """(batch', seq) int64 positions: one range for every row, a range per row, or any
    values; near 0, beyond the cached tables, or near the 2**53 limit."""
    batch, seq = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    start = draw(st.sampled_from([0, 3000, 2**40, MAX_POSITION - 100])) + draw(st.integers(0, 50))
    kind = draw(st.sampled_from(["one range", "a range per row", "any"]))
    if kind == "one range":
        values = np.broadcast_to(start + np.arange(seq), (draw(st.sampled_from([1, batch])), seq))
    elif kind == "a range per row":
        firsts = draw(st.lists(st.integers(0, 9), min_size=batch, max_size=batch))
        values = start + np.array(firsts)[:, None] + np.arange(seq)
    else:
        scattered = draw(st.lists(st.integers(0, 20), min_size=batch * seq, max_size=batch * seq))
        values = start + np.array(scattered).reshape(batch, seq)
    return {
        "batch": batch,
        "positions": np.ascontiguousarray(values, dtype=np.int64),
        "layout": draw(st.sampled_from(["bshd", "bhsd", "sbhd"])),
        "interleaved": draw(st.booleans()),
        "rotary_dim": draw(st.sampled_from([8, 16])),
        "inverse": draw(st.booleans()),
        "inplace": draw(st.booleans()),
    }


@pytest.mark.parametrize(
    ("library", "dtype"),
    [(library, dtype) for library in LIBRARIES for dtype in ("float32", "float16")]
    + [("torch", "bfloat16")],
    ids=str,
)
@pytest.mark.parametrize("impl", [*HOST_PATHS, "array_api"])
@SETTINGS
@given(case=_positions())
def test_positions_of_a_known_geometry_give_the_bits_of_a_first_call(
    library: str, dtype: str, impl: str, case: dict[str, Any]
) -> None:
    as_array = _library(library)
    positions = case["positions"]
    seq, layout = positions.shape[-1], case["layout"]
    shape = {"bshd": (case["batch"], seq, 3, 16), "bhsd": (case["batch"], 3, seq, 16)}
    shape["sbhd"] = (seq, case["batch"], 3, 16)
    values = np.random.default_rng(seq).standard_normal(shape[layout]).astype(np.float32)

    def x() -> Any:
        return _cast(as_array(values), dtype)

    options = {"layout": layout, "inverse": case["inverse"], "inplace": case["inplace"]}
    settings_ = {"interleaved": case["interleaved"], "rotary_dim": case["rotary_dim"]}
    rope = anyrope.RoPE(16, **settings_)
    rope.rotate(x(), as_array(positions[::-1].copy()), impl=impl, **options)  # plans it
    got = rope.rotate(x(), as_array(positions), impl=impl, **options)
    want = anyrope.RoPE(16, **settings_).rotate(
        x(), as_array(positions), impl="array_api", layout=layout, inverse=case["inverse"]
    )
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("rows", [1, 3, 100])
@pytest.mark.parametrize(
    ("bad", "message"),
    [(-1, "non-negative; got a minimum of -1"), (MAX_POSITION, f"maximum of {MAX_POSITION}")],
    ids=["negative", "2**53"],
)
def test_positions_of_a_known_geometry_out_of_range_are_refused(
    library: str, rows: int, bad: int, message: str
) -> None:
    as_array = _library(library)
    x = as_array(np.ones((rows, 1, 2, 8), np.float32))
    positions = np.full((rows, 1), 5, np.int64)
    rope = anyrope.RoPE(8)
    rope.rotate(x, as_array(positions))
    positions[-1, 0] = bad
    with pytest.raises(ValueError, match=message):
        rope.rotate(x, as_array(positions))


def test_wide_unsigned_positions_of_a_known_geometry_are_reported_as_themselves() -> None:
    x = np.ones((2, 1, 2, 8), np.float32)
    rope = anyrope.RoPE(8)
    rope.rotate(x, np.array([[0], [1]], np.uint64))
    with pytest.raises(ValueError, match=str(2**64 - 1)):
        rope.rotate(x, np.array([[0], [2**64 - 1]], np.uint64))


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_row_that_wraps_around_in_a_narrow_dtype_is_not_taken_for_a_range(library: str) -> None:
    as_array = _library(library)
    x = as_array(np.random.default_rng(0).standard_normal((1, 256, 1, 8)).astype(np.float32))
    # 1, 2, ..., 255, 0: every difference is 1 modulo 256, and the values span 256 integers.
    wraps = as_array(((np.arange(256) + 1) % 256).astype(np.uint8)[None])
    rope = anyrope.RoPE(8)
    rope.rotate(x, as_array(np.zeros((1, 256), np.uint8)))
    got = rope.rotate(x, wraps)
    want = anyrope.RoPE(8).rotate(x, wraps, impl="array_api")
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("impl", HOST_PATHS)
def test_torch_positions_with_the_negative_bit_are_read_as_their_values(impl: str) -> None:
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((2, 1, 2, 8)).astype(np.float32))
    rope = anyrope.RoPE(8)
    rope.rotate(x, torch.tensor([[1], [2]]), impl=impl)  # plans the geometry
    negated = torch._neg_view(torch.tensor([[-5], [-3]]))  # the values 5 and 3
    got = rope.rotate(x, negated, impl=impl)
    want = anyrope.RoPE(8).rotate(x, torch.tensor([[5], [3]]), impl="array_api")
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("impl", HOST_PATHS)
@pytest.mark.parametrize("form", ["grouped", "stacked"])
def test_a_fused_decode_step_in_place_costs_no_more_calls_than_its_views(
    library: str, impl: str, form: str
) -> None:
    """Issue 26: ``rotate_qkv(inplace=True)`` took three times the time of ``rope`` on
    q and k views of the same buffer (three views made, two arrays checked for overlap)."""
    as_array = _library(library)
    shape = (1, 1, 4 + 2 * 2, 16) if form == "grouped" else (1, 1, 3, 4, 16)
    qkv = as_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    if form == "grouped":
        q, k, heads = qkv[:, :, :4], qkv[:, :, 4:6], {"num_heads_q": 4}
    else:
        q, k, heads = qkv[:, :, 0], qkv[:, :, 1], {}
    rope = anyrope.RoPE(16)
    fused, views = _python_calls(
        lambda: rope.rotate_qkv(qkv, 1000, inplace=True, impl=impl, **heads),
        lambda: rope(q, k, positions=1000, impl=impl),
    )
    assert fused <= views, (fused, views)
