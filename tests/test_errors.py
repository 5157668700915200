"""Bad input gets a clear error naming the argument, never a silent wrong answer."""

from __future__ import annotations

import json

import numpy as np
import pytest

import anyrope
from anyrope.tools._backends import extra_backends, known_backends
from subprocess_run import run_python

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
    (
        "x-masked",
        lambda: anyrope.rotate(np.ma.masked_array(X, mask=X > 0)),
        TypeError,
        ["`x`", "masked array", "(2, 5, 3, 8)"],
    ),
    (
        "k-masked",
        lambda: anyrope.rotate_qk(Q, np.ma.masked_array(K), impl="blocked"),
        TypeError,
        ["`k`", "masked array"],
    ),
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
    ("base-huge-int", lambda: anyrope.RoPE(8, base=10**400), ValueError, ["`base`", "1000"]),
    ("rotate-base-huge-int", lambda: anyrope.rotate(X, base=10**400), ValueError, ["`base`"]),
    (
        "sinusoidal-base-huge-int",
        lambda: anyrope.sinusoidal(4, 8, base=10**400, dtype=np.float32),
        ValueError,
        ["`base`"],
    ),
    (
        "scaling-factor-huge-int",
        lambda: anyrope.RoPE(8, scaling={"rope_type": "linear", "factor": 10**400}),
        ValueError,
        ["`factor`", "finite"],
    ),
    (
        "max_position_embeddings-huge-int",
        lambda: anyrope.rotate(
            X, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=10**400
        ),
        ValueError,
        ["`max_position_embeddings`", "2**53"],
    ),
    (
        "sinusoidal-xp-str",
        lambda: anyrope.sinusoidal(4, 8, dtype=np.float32, xp="numpy"),
        TypeError,
        ["`xp`", "'numpy'"],
    ),
    (
        "tables-xp-str",
        lambda: anyrope.RoPE(8).tables(4, dtype=np.float32, xp="numpy"),
        TypeError,
        ["`xp`", "'numpy'"],
    ),
    (
        "attention-rope-str",
        lambda: anyrope.attention(Q, Q, Q, rope="rope"),
        TypeError,
        ["`rope`", "'rope'", "str"],
    ),
    (
        "linear_attention-rope-int",
        lambda: anyrope.linear_attention(Q, Q, Q, rope=8),
        TypeError,
        ["`rope`", "8", "int"],
    ),
    (
        "attention-mask-list",
        lambda: anyrope.attention(Q, Q, Q, mask=[[True]]),
        TypeError,
        ["`mask`", "list"],
    ),
    (
        "tables-float-positions",
        lambda: anyrope.RoPE(8).tables(np.arange(3.0), dtype=np.float32),
        TypeError,
        ["positions", "float64"],
    ),
    (
        "frequencies-float-length",
        lambda: anyrope.RoPE(8).frequencies(150.5),
        TypeError,
        ["`seq_len`", "150.5", "float"],
    ),
    (
        "frequencies-negative-length",
        lambda: anyrope.RoPE(8).frequencies(-5),
        ValueError,
        ["`seq_len`", "-5"],
    ),
    (
        "rope-scaling-positional-keys",
        lambda: anyrope.RopeScaling("linear", 4.0),
        TypeError,
        ["by keyword", "RopeScaling('linear', factor=4.0)", "2 positional"],
    ),
    (
        "rotate-layout-misspelled",
        lambda: anyrope.rotate(Q, layout="tdh"),
        ValueError,
        ["`layout`", "'thd'", "'tdh'"],
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


LIBRARIES = ["numpy", "torch", "array_api_strict", "jax", "dask"]
PAIRS = [(a, b) for a in LIBRARIES for b in LIBRARIES if a != b]


def _library(name):
    """The CPU backend of the library called ``name`` (skipped when not installed)."""
    for backend in (*known_backends(), *extra_backends()):
        if backend.name == name and backend.device_label == "cpu":
            if backend.unavailable is not None:
                pytest.skip(backend.unavailable)
            return backend
    pytest.skip(f"no CPU backend {name}")
    return None


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_q_and_k_from_different_libraries(first, second):
    q = _library(first).from_numpy(Q)
    k = _library(second).from_numpy(K)
    for call in (lambda: anyrope.rotate_qk(q, k), lambda: anyrope.XPos(8)(q, k)):
        with pytest.raises(TypeError) as info:
            call()
        message = str(info.value)
        for word in ("`q`", "`k`", f"from {first}", f"from {second}"):
            assert word in message, f"{word!r} not in {message!r}"


FOREIGN = [pair for pair in PAIRS if pair != ("dask", "numpy")]  # NumPy positions are dask's too


@pytest.mark.parametrize(("first", "second"), FOREIGN, ids=[f"{a}-{b}" for a, b in FOREIGN])
def test_positions_from_another_library(first, second):
    x = _library(first).from_numpy(X)
    positions = _library(second).from_numpy(np.arange(5, dtype=np.int64))
    with pytest.raises(TypeError, match=r"`positions`.*(same library|NumPy or dask)"):
        anyrope.rotate(x, positions=positions)


@pytest.mark.parametrize(("library", "other"), PAIRS, ids=[f"x-{a}-xp-{b}" for a, b in PAIRS])
def test_xp_of_another_library_is_named(library, other):
    x = _library(library).from_numpy(X)
    xp = _library(other).xp
    calls = {
        "x": lambda: anyrope.rotate(x, xp=xp),
        "q` and `k": lambda: anyrope.rotate_qk(x, x, xp=xp),
        "qkv": lambda: anyrope.RoPE(8).rotate_qkv(x[:, :, :, None, :], xp=xp),
    }
    for names, call in calls.items():
        with pytest.raises(TypeError) as info:
            call()
        message = str(info.value)
        for word in (f"`{names}`", library, "`xp`", other):
            assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize("library", LIBRARIES)
def test_xp_of_the_arrays_library_gives_the_same_bits(library):
    backend = _library(library)
    x = backend.from_numpy(np.random.default_rng(0).standard_normal(X.shape).astype(np.float32))
    want = backend.to_numpy(anyrope.rotate(x, 3))
    np.testing.assert_array_equal(backend.to_numpy(anyrope.rotate(x, 3, xp=backend.xp)), want)


@pytest.mark.parametrize("library", LIBRARIES)
def test_path_takes_the_xp_of_the_arrays_library(library):
    backend = _library(library)
    x = backend.from_numpy(X)
    rope = anyrope.RoPE(8)
    assert rope.path(x, xp=backend.xp) == rope.path(x)


@pytest.mark.parametrize("xp", ["numpy", 3], ids=["str", "int"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_xp_that_is_not_a_namespace_is_refused(library, xp):
    x = _library(library).from_numpy(X)
    with pytest.raises(TypeError, match=rf"`xp` must be an array-API namespace.*got {xp!r}"):
        anyrope.rotate(x, xp=xp)


FLAGS = [("inverse", True, 1), ("inverse", False, 0), ("inplace", False, 0)]
FLAG_IDS = [f"{name}={bad}" for name, _, bad in FLAGS]


@pytest.mark.parametrize(("flag", "good", "bad"), FLAGS, ids=FLAG_IDS)
@pytest.mark.parametrize("library", LIBRARIES)
def test_flags_are_checked_whatever_ran_before(library, flag, good, bad):
    """1 for True and 0 for False are refused, also after the same call with True/False
    was planned (and kept: the plan cache compares keys by ==, and 1 == True)."""
    x = _library(library).from_numpy(X)
    rope = anyrope.RoPE(8)
    calls = [
        lambda value: anyrope.rotate(x, 2, **{flag: value}),
        lambda value: anyrope.rotate_qk(x, x, **{flag: value}),
        lambda value: rope.rotate(x, **{flag: value}),
        lambda value: anyrope.XPos(8)(x, x, **{flag: value}),
    ]
    for call in calls:
        call(good)
        with pytest.raises(TypeError, match=rf"`{flag}` must be True or False; got {bad}"):
            call(bad)


CACHE_ORDER = """
import json, numpy as np, anyrope
x = np.zeros((2, 5, 3, 8), np.float32)
seen = []
for value in {values}:
    try:
        anyrope.rotate(x, 2, {flag}=value)
        seen.append("accepted")
    except TypeError as error:
        seen.append(str(error))
print(json.dumps(seen))
"""


@pytest.mark.parametrize(("flag", "good", "bad"), FLAGS, ids=FLAG_IDS)
def test_the_same_call_gets_the_same_answer_in_a_fresh_process(flag, good, bad):
    """A bad flag alone in a fresh process, and after the good one in the same process."""
    answers = []
    for values in ([bad], [good, bad]):
        done = run_python("-c", CACHE_ORDER.format(values=values, flag=flag))
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout)[-1])
    assert answers[0] == answers[1]
    assert answers[0] == f"`{flag}` must be True or False; got {bad}"


def test_a_meta_tensor_beside_real_ones_is_refused_by_name():
    """Meta tensors alone give meta results (tests/test_torch_compile.py)."""
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="`k` is on the meta device"):
        anyrope.rotate_qk(torch.zeros(2, 5, 4, 8), torch.zeros(2, 5, 2, 8, device="meta"))


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


def test_arrays_and_dtypes_of_another_library_are_named():
    torch = pytest.importorskip("torch")
    q = torch.zeros(2, 5, 4, 8)
    with pytest.raises(TypeError, match=r"`dtype` must be a real floating dtype of torch"):
        anyrope.sinusoidal(torch.arange(4), 8, dtype=np.float32)
    with pytest.raises(TypeError, match=r"`dtype` must be a real floating dtype of torch"):
        anyrope.RoPE(8).tables(torch.arange(4), dtype=np.float32)
    with pytest.raises(TypeError, match=r"`q` and `mask`.*`q` from torch and `mask` from numpy"):
        anyrope.attention(q, q, q, mask=np.ones((5, 5), bool))
    with pytest.raises(TypeError, match=r"`positions` is an array of torch but `xp` is .* numpy"):
        anyrope.sinusoidal(torch.arange(4), 8, dtype=np.float32, xp=np)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda x: anyrope.rotate(x[0, 0, 0]), ["`x`", "3 axes", "jax array of shape (8,)"]),
        (lambda x: anyrope.RoPE(16).rotate(x), ["`x`", "head_dim=16", "jax array"]),
        (lambda x: anyrope.rotate_qk(x, x[:, :4]), ["`k`", "seq 5", "seq 4"]),
    ],
    ids=["rank", "head_dim", "seq"],
)
def test_jax_arrays_are_described_as_jax_arrays(call, words):
    """Eager JAX arrays are rotated through NumPy views; the messages name the caller's."""
    x = _library("jax").from_numpy(X)
    with pytest.raises(ValueError, match=words[0]) as info:
        call(x)
    message = str(info.value)
    assert "numpy" not in message
    for word in words[1:]:
        assert word in message, f"{word!r} not in {message!r}"
