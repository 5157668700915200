"""Bad input gets a clear error naming the argument, never a silent wrong answer."""

from __future__ import annotations

import numpy as np
import pytest

import anyrope

X = np.zeros((2, 5, 3, 8), dtype=np.float32)
Q = np.zeros((2, 5, 4, 8), dtype=np.float32)
K = np.zeros((2, 5, 2, 8), dtype=np.float32)

BAD_CALLS = [
    # (id, callable, exception, words the message must contain)
    ("head_dim-odd", lambda: anyrope.RoPE(7), ValueError, ["head_dim", "7"]),
    ("head_dim-zero", lambda: anyrope.RoPE(0), ValueError, ["head_dim", "0"]),
    ("head_dim-negative", lambda: anyrope.RoPE(-4), ValueError, ["head_dim", "-4"]),
    ("head_dim-float", lambda: anyrope.RoPE(8.0), TypeError, ["head_dim", "8.0"]),
    ("head_dim-bool", lambda: anyrope.RoPE(True), TypeError, ["head_dim", "True"]),
    ("rotary_dim-odd", lambda: anyrope.RoPE(8, rotary_dim=5), ValueError, ["rotary_dim", "5"]),
    (
        "rotary_dim-too-large",
        lambda: anyrope.RoPE(8, rotary_dim=10),
        ValueError,
        ["rotary_dim", "10", "head_dim=8"],
    ),
    ("rotary_dim-zero", lambda: anyrope.rotate(X, rotary_dim=0), ValueError, ["rotary_dim", "0"]),
    ("rotary_dim-str", lambda: anyrope.rotate(X, rotary_dim="4"), TypeError, ["rotary_dim", "'4'"]),
    (
        "x-last-axis-odd",
        lambda: anyrope.rotate(np.zeros((1, 2, 3, 7), np.float32)),
        ValueError,
        ["`x`", "head_dim", "(1, 2, 3, 7)"],
    ),
    (
        "x-int",
        lambda: anyrope.rotate(np.zeros((1, 2, 3, 8), np.int32)),
        TypeError,
        ["`x`", "int32"],
    ),
    ("x-bool", lambda: anyrope.rotate(np.zeros((1, 2, 3, 8), bool)), TypeError, ["`x`", "bool"]),
    (
        "x-complex",
        lambda: anyrope.rotate(np.zeros((1, 2, 3, 8), np.complex64)),
        TypeError,
        ["`x`", "complex64"],
    ),
    ("x-list", lambda: anyrope.rotate([[1.0, 2.0]]), TypeError, ["`x`", "list"]),
    ("x-scalar", lambda: anyrope.rotate(3.0), TypeError, ["`x`", "float"]),
    (
        "x-rank-too-low",
        lambda: anyrope.rotate(np.zeros((5, 8), np.float32)),
        ValueError,
        ["`x`", "3 axes", "(5, 8)"],
    ),
    ("layout-unknown", lambda: anyrope.rotate(X, layout="bsdh"), ValueError, ["layout", "'bsdh'"]),
    ("layout-none", lambda: anyrope.rotate(X, layout=None), ValueError, ["layout", "None"]),
    (
        "positions-float",
        lambda: anyrope.rotate(X, positions=1.5),
        TypeError,
        ["positions", "float"],
    ),
    ("positions-bool", lambda: anyrope.rotate(X, positions=True), TypeError, ["positions", "True"]),
    (
        "positions-negative-offset",
        lambda: anyrope.rotate(X, positions=-1),
        ValueError,
        ["positions", "-1"],
    ),
    (
        "positions-float-array",
        lambda: anyrope.rotate(X, positions=np.arange(5.0)),
        TypeError,
        ["positions", "float64"],
    ),
    (
        "positions-bool-array",
        lambda: anyrope.rotate(X, positions=np.ones(5, bool)),
        TypeError,
        ["positions", "bool"],
    ),
    (
        "positions-negative-array",
        lambda: anyrope.rotate(X, positions=np.array([0, 1, -2, 3, 4])),
        ValueError,
        ["positions", "-2"],
    ),
    (
        "positions-no-broadcast",
        lambda: anyrope.rotate(X, positions=np.arange(4)),
        ValueError,
        ["positions", "(4,)", "(2, 5)"],
    ),
    (
        "positions-heads-axis",
        lambda: anyrope.rotate(X, positions=np.zeros((2, 5, 3), np.int64)),
        ValueError,
        ["positions", "(2, 5, 3)"],
    ),
    (
        "positions-beyond-2**53",
        lambda: anyrope.rotate(X, positions=2**53),
        ValueError,
        ["positions", "2**53"],
    ),
    (
        "positions-array-beyond-2**53",
        lambda: anyrope.rotate(X, positions=np.full(5, 2**53, np.int64)),
        ValueError,
        ["positions", "2**53", str(2**53)],
    ),
    (
        "positions-list",
        lambda: anyrope.rotate(X, positions=[0, 1, 2, 3, 4]),
        TypeError,
        ["positions", "list"],
    ),
    ("positions-str", lambda: anyrope.rotate(X, positions="0"), TypeError, ["positions", "str"]),
    ("base-zero", lambda: anyrope.RoPE(8, base=0.0), ValueError, ["base", "0.0"]),
    ("base-negative", lambda: anyrope.rotate(X, base=-10.0), ValueError, ["base", "-10.0"]),
    ("base-one", lambda: anyrope.RoPE(8, base=1.0), ValueError, ["base", "1.0"]),
    ("base-nan", lambda: anyrope.RoPE(8, base=float("nan")), ValueError, ["base", "nan"]),
    ("base-inf", lambda: anyrope.RoPE(8, base=float("inf")), ValueError, ["base", "inf"]),
    ("base-str", lambda: anyrope.RoPE(8, base="10000"), TypeError, ["base", "'10000'"]),
    (
        "interleaved-str",
        lambda: anyrope.RoPE(8, interleaved="yes"),
        TypeError,
        ["interleaved", "'yes'"],
    ),
    ("inverse-int", lambda: anyrope.rotate(X, inverse=1), TypeError, ["inverse", "1"]),
    ("inplace-none", lambda: anyrope.rotate(X, inplace=None), TypeError, ["inplace", "None"]),
    ("impl-unknown", lambda: anyrope.rotate(X, impl="fast"), ValueError, ["impl", "'fast'"]),
    (
        "x-wrong-head_dim-for-rope",
        lambda: anyrope.RoPE(16).rotate(X),
        ValueError,
        ["`x`", "head_dim=16"],
    ),
    (
        "qk-dtypes",
        lambda: anyrope.rotate_qk(Q, K.astype(np.float64)),
        TypeError,
        ["`k`", "float32", "float64"],
    ),
    (
        "qk-batch",
        lambda: anyrope.rotate_qk(Q, np.zeros((3, 5, 2, 8), np.float32)),
        ValueError,
        ["`k`", "batch", "(2,)", "(3,)"],
    ),
    (
        "qk-seq",
        lambda: anyrope.rotate_qk(Q, np.zeros((2, 6, 2, 8), np.float32)),
        ValueError,
        ["`k`", "seq 5", "seq 6"],
    ),
    (
        "qk-head_dim",
        lambda: anyrope.rotate_qk(Q, np.zeros((2, 5, 2, 16), np.float32)),
        ValueError,
        ["`k`", "head_dim=8"],
    ),
    (
        "inplace-read-only",
        lambda: anyrope.rotate(np.broadcast_to(X, X.shape), inplace=True),
        ValueError,
        ["inplace", "read-only"],
    ),
    (
        "tables-int-dtype",
        lambda: anyrope.RoPE(8).tables(4, dtype=np.int32),
        TypeError,
        ["dtype", "int32"],
    ),
    (
        "tables-negative-count",
        lambda: anyrope.RoPE(8).tables(-1, dtype=np.float32),
        ValueError,
        ["positions", "-1"],
    ),
    (
        "tables-float-positions",
        lambda: anyrope.RoPE(8).tables(np.arange(3.0), dtype=np.float32),
        TypeError,
        ["positions", "float64"],
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "words"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_there_are_at_least_thirty_distinct_checks():
    assert len({c[0] for c in BAD_CALLS}) >= 30


def test_q_and_k_from_different_libraries():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="q and k"):
        anyrope.rotate_qk(Q, torch.zeros(2, 5, 2, 8))


def test_positions_from_another_library():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"positions.*same library"):
        anyrope.rotate(torch.zeros(2, 5, 3, 8), positions=np.arange(5))


def test_meta_tensors_are_refused_by_name():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="`k` is on the meta device"):
        anyrope.rotate_qk(torch.zeros(2, 5, 4, 8), torch.zeros(2, 5, 2, 8, device="meta"))
    with pytest.raises(ValueError, match="`x` is on the meta device"):
        anyrope.rotate(torch.zeros(2, 5, 4, 8, device="meta"))


def test_blocked_refuses_other_libraries():
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(ValueError, match=r"impl.*blocked.*array_api_strict"):
        anyrope.rotate(strict.zeros((2, 5, 3, 8)), impl="blocked")


@pytest.mark.parametrize(
    "shape", [(0, 5, 3, 8), (2, 0, 3, 8), (2, 5, 0, 8)], ids=["batch0", "seq0", "heads0"]
)
def test_empty_axes_return_empty_arrays(backend, shape):
    x = backend.from_numpy(np.zeros(shape, np.float32))
    y = anyrope.rotate(x, positions=3)
    assert tuple(y.shape) == shape
    assert y.dtype == x.dtype
