"""M-RoPE (Qwen2-VL: positions ``(3, *batch, seq)``) and 2D axial RoPE (positions ``(..., 2)``)."""

from __future__ import annotations

import json
from pathlib import Path

import array_api_compat.numpy as numpy_xp
import numpy as np
import pytest

import anyrope
from anyrope._mrope import join_sections
from anyrope.tools._backends import numpy_dtype

SECTION = [4, 6, 6]  # a small [16, 24, 24]: sums to head_dim // 2 = 16
MROPE = {"type": "mrope", "mrope_section": SECTION}
AXIAL = {"rope_type": "axial"}


def _x(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(numpy_dtype(dtype))


def _pair_features(pairs: range, head_dim: int, interleaved: bool) -> list[int]:
    """Feature indices of the given pairs in the last axis."""
    if interleaved:
        return [f for i in pairs for f in (2 * i, 2 * i + 1)]
    return [*pairs, *(i + head_dim // 2 for i in pairs)]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
def test_text_only_is_ordinary_rope_bitwise(backend_dtype, layout: str, interleaved: bool) -> None:
    backend, dtype = backend_dtype
    shape = {"bshd": (2, 9, 3, 32), "bhsd": (2, 3, 9, 32), "sbhd": (9, 2, 3, 32)}[layout]
    x = backend.from_numpy(_x(shape, dtype))
    mrope = anyrope.RoPE(32, base=1e6, interleaved=interleaved, scaling=MROPE)
    plain = anyrope.RoPE(32, base=1e6, interleaved=interleaved)
    text = np.stack([np.arange(5, 14)[None, :].repeat(2, axis=0)] * 3)  # (3, batch, seq)
    got = mrope.rotate(x, backend.from_numpy(text), layout=layout)
    expected = plain.rotate(x, backend.from_numpy(text[0]), layout=layout)
    np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(expected))
    # None and an int offset are text-only too
    np.testing.assert_array_equal(
        backend.to_numpy(mrope.rotate(x, 5, layout=layout)),
        backend.to_numpy(plain.rotate(x, 5, layout=layout)),
    )


@pytest.mark.parametrize("positions", ["none", "int", "0-d", "per-sequence"])
def test_packed_sequences_are_text_only(backend, positions: str) -> None:
    """M-RoPE of packed sequences (layout="thd") rotates text tokens: the bits of
    ordinary RoPE, for every form of offsets (it was refused, naming a shape never given)."""
    mrope = anyrope.RoPE(32, base=1e6, scaling=MROPE)
    plain = anyrope.RoPE(32, base=1e6)
    x = backend.from_numpy(_x((9, 3, 32)))
    cu_seqlens = backend.from_numpy(np.array([0, 4, 9]))
    offsets = {
        "none": None,
        "int": 5,
        "0-d": backend.from_numpy(np.array(5)),
        "per-sequence": backend.from_numpy(np.array([3, 70])),
    }[positions]
    got = mrope.rotate(x, offsets, layout="thd", cu_seqlens=cu_seqlens)
    expected = plain.rotate(x, offsets, layout="thd", cu_seqlens=cu_seqlens)
    np.testing.assert_array_equal(backend.to_numpy(got), backend.to_numpy(expected))


def test_axial_rope_of_packed_sequences_is_refused_by_name() -> None:
    axial = anyrope.RoPE(32, scaling=AXIAL)
    with pytest.raises(ValueError, match=r"axial RoPE takes coordinates per token"):
        axial.rotate(_x((9, 3, 32)), layout="thd", cu_seqlens=np.array([0, 4, 9]))


@pytest.mark.parametrize("impl", ["auto", "array_api"])
@pytest.mark.parametrize("kind", ["mrope", "axial"])
def test_one_stream_holds_on_every_call_of_the_same_shape(backend, kind: str, impl: str) -> None:
    """Sections of one stream take the path of several: the second call of a shape gave
    an array of another shape, or failed, when the stream was read as plain positions."""
    # positions (1, batch, seq) for M-RoPE, (batch, seq, 1) for axial
    axis = 0 if kind == "mrope" else -1
    key = "mrope_section" if kind == "mrope" else "axial_sections"
    rope = anyrope.RoPE(8, scaling={"rope_type": "default" if axis == 0 else "axial", key: [4]})
    x = backend.from_numpy(_x((2, 5, 3, 8)))
    p = np.random.default_rng(1).integers(0, 50, size=(2, 5))
    positions = backend.from_numpy(np.expand_dims(p, axis))
    expected = backend.to_numpy(anyrope.rotate(x, backend.from_numpy(p)))
    for _ in range(3):
        got = backend.to_numpy(rope.rotate(x, positions, impl=impl))
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("interleaved", [False, True])
def test_each_section_follows_its_stream(backend_dtype, interleaved: bool) -> None:
    """Pair i takes the angle of stream s(i): equal to ordinary RoPE with that stream."""
    backend, dtype = backend_dtype
    rng = np.random.default_rng(3)
    x = backend.from_numpy(_x((2, 7, 2, 32), dtype))
    streams = rng.integers(0, 5000, size=(3, 2, 7))
    mrope = anyrope.RoPE(32, interleaved=interleaved, scaling=MROPE)
    plain = anyrope.RoPE(32, interleaved=interleaved)
    got = backend.to_numpy(mrope.rotate(x, backend.from_numpy(streams)))
    start = 0
    for stream, size in enumerate(SECTION):
        features = _pair_features(range(start, start + size), 32, interleaved)
        expected = backend.to_numpy(plain.rotate(x, backend.from_numpy(streams[stream])))
        np.testing.assert_array_equal(got[..., features], expected[..., features])
        start += size


INTERLEAVED_SECTION = [6, 5, 5]  # a small Qwen3-VL [24, 20, 20]
INTERLEAVED_MROPE = {
    "rope_type": "default",
    "mrope_section": INTERLEAVED_SECTION,
    "mrope_interleaved": True,
}


def _interleaved_stream_of_pair(sections: list[int]) -> list[int]:
    """transformers' recomposition_frequencies, written as a loop over the pairs."""
    streams = []
    for pair in range(sum(sections)):
        stream = pair % 3
        streams.append(stream if stream and pair < 3 * sections[stream] else 0)
    return streams


@pytest.mark.parametrize("sections", [[3, 2, 2], [4, 1, 1], [6, 5, 5], [24, 20, 20]])
def test_interleaved_join_takes_each_pair_from_its_stream(sections: list[int]) -> None:
    """The joined tables of interleaved M-RoPE: pair i from stream i % 3 while within that
    stream's count, else from stream 0 ([4, 1, 1]: streams 0, 1, 2, 0, 0, 0)."""
    pairs = sum(sections)
    tables = [(np.full((2, pairs), s, dtype=np.float32),) * 2 for s in range(3)]
    cos, sin = join_sections(tables, sections, numpy_xp, interleaved=True)
    owner = _interleaved_stream_of_pair(sections)
    assert cos.tolist() == sin.tolist() == [owner] * 2


@pytest.mark.parametrize("interleaved", [False, True])
def test_interleaved_mrope_each_pair_follows_its_stream(backend_dtype, interleaved: bool) -> None:
    """Qwen3-VL: pair i takes the angle of stream i % 3 while within that stream's count."""
    backend, dtype = backend_dtype
    x = backend.from_numpy(_x((2, 7, 2, 32), dtype))
    streams = np.random.default_rng(4).integers(0, 5000, size=(3, 2, 7))
    mrope = anyrope.RoPE(32, interleaved=interleaved, scaling=INTERLEAVED_MROPE)
    plain = anyrope.RoPE(32, interleaved=interleaved)
    got = backend.to_numpy(mrope.rotate(x, backend.from_numpy(streams)))
    owner = _interleaved_stream_of_pair(INTERLEAVED_SECTION)
    assert owner[:9] == [0, 1, 2] * 3  # the three streams in turn, not contiguous runs
    for stream in range(3):
        pairs = [pair for pair, s in enumerate(owner) if s == stream]
        features = _pair_features(pairs, 32, interleaved)  # type: ignore[arg-type]
        expected = backend.to_numpy(plain.rotate(x, backend.from_numpy(streams[stream])))
        np.testing.assert_array_equal(got[..., features], expected[..., features])
    text = np.stack([streams[0]] * 3)
    np.testing.assert_array_equal(
        backend.to_numpy(mrope.rotate(x, backend.from_numpy(text))),
        backend.to_numpy(plain.rotate(x, backend.from_numpy(streams[0]))),
    )


@pytest.mark.parametrize("impl", ["numba", "blocked", "array_api"])
def test_interleaved_mrope_every_path_gives_the_same_bits(impl: str) -> None:
    if impl == "numba":
        pytest.importorskip("numba")
    q, k = _x((2, 9, 4, 32)), _x((2, 9, 2, 32), seed=1)
    streams = np.random.default_rng(5).integers(0, 70000, size=(3, 2, 9))
    mrope = anyrope.RoPE(32, scaling=INTERLEAVED_MROPE)
    contiguous = anyrope.RoPE(32, scaling=MROPE | {"mrope_section": INTERLEAVED_SECTION})
    q1, k1 = mrope(q, k, streams, impl=impl)
    q0, k0 = mrope(q, k, streams, impl="array_api")
    np.testing.assert_array_equal(q1, q0)
    np.testing.assert_array_equal(k1, k0)
    assert not np.array_equal(q1, contiguous(q, k, streams, impl=impl)[0])


def test_qwen3_vl_tables_interleave_the_streams() -> None:
    rope = anyrope.RoPE(128, base=5e6, scaling={**INTERLEAVED_MROPE, "mrope_section": [24, 20, 20]})
    streams = np.array([[[0, 1, 5, 9]], [[0, 2, 3, 4]], [[0, 7, 1, 8]]])  # (3, batch=1, seq=4)
    cos, sin = rope.tables(streams, dtype=np.float64)
    angles = streams.astype(np.float64)[..., None] * rope.inv_freq  # (3, 1, 4, 64)
    owner = _interleaved_stream_of_pair([24, 20, 20])
    expected = np.stack([angles[s, ..., pair] for pair, s in enumerate(owner)], axis=-1)
    np.testing.assert_array_equal(cos, np.cos(expected))
    np.testing.assert_array_equal(sin, np.sin(expected))


@pytest.mark.parametrize(
    ("scaling", "error", "message"),
    [
        ({"rope_type": "default", "mrope_interleaved": True}, ValueError, r"needs `mrope_section`"),
        ({**INTERLEAVED_MROPE, "mrope_interleaved": "yes"}, TypeError, r"true or false; got 'yes'"),
    ],
)
def test_mrope_interleaved_errors(scaling: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        anyrope.RoPE(32, scaling=scaling)


def test_qwen2_vl_config_and_tables() -> None:
    config = json.loads(
        (Path(__file__).parent / "configs" / "qwen2-vl-7b-instruct.json").read_text()
    )
    rope = anyrope.RoPE.from_hf_config(config)
    assert rope.sections == (16, 24, 24)
    streams = np.array([[[0, 1, 1, 1]], [[0, 1, 1, 2]], [[0, 1, 2, 1]]])  # (3, batch=1, seq=4)
    cos, sin = rope.tables(streams, dtype=np.float64)
    assert cos.shape == (1, 4, 64)
    angles = streams.astype(np.float64)[..., None] * rope.inv_freq  # (3, 1, 4, 64)
    expected = np.concatenate([angles[0, ..., :16], angles[1, ..., 16:40], angles[2, ..., 40:]], -1)
    np.testing.assert_array_equal(cos, np.cos(expected))
    np.testing.assert_array_equal(sin, np.sin(expected))


def test_broadcast_batch_and_rotate_qk() -> None:
    mrope = anyrope.RoPE(32, scaling=MROPE)
    q, k = _x((3, 6, 4, 32)), _x((3, 6, 1, 32), seed=1)
    streams = np.random.default_rng(0).integers(0, 100, size=(3, 6))  # (3, seq): one for all rows
    q2, k2 = mrope(q, k, streams)
    q3, k3 = mrope(q, k, np.broadcast_to(streams[:, None, :], (3, 3, 6)).copy())
    np.testing.assert_array_equal(q2, q3)
    np.testing.assert_array_equal(k2, k3)
    np.testing.assert_array_equal(anyrope.rotate(q, streams, scaling=MROPE), q2)


@pytest.mark.parametrize(
    ("positions", "error", "message"),
    [
        (np.zeros((2, 6), dtype=np.int64), ValueError, r"must have shape \(3, \*batch, seq\)"),
        (np.zeros((3, 2, 5), dtype=np.int64), ValueError, r"does not broadcast"),
        (np.zeros((3, 6)), TypeError, r"integer dtype"),
        (-np.ones((3, 6), dtype=np.int64), ValueError, r"non-negative"),
        ([[0] * 6] * 3, TypeError, r"an integer array; got list"),
    ],
)
def test_mrope_position_errors(positions: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        anyrope.RoPE(32, scaling=MROPE).rotate(_x((2, 6, 1, 32)), positions)


def test_mrope_section_must_cover_the_pairs() -> None:
    with pytest.raises(ValueError, match=r"`mrope_section` must sum to rotary_dim // 2 = 16"):
        anyrope.RoPE(32, scaling={"type": "mrope", "mrope_section": [4, 4, 4]})


def _patches(size: int) -> np.ndarray:
    rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    return np.stack([rows.ravel(), cols.ravel()], axis=-1)  # (size * size, 2)


def test_axial_score_depends_only_on_the_2d_offset() -> None:
    rope = anyrope.RoPE(32, scaling=AXIAL)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 1, 32)), rng.standard_normal((1, 1, 32))

    def score(a: tuple[int, int], b: tuple[int, int]) -> float:
        qa = rope.rotate(q, np.array([a]))
        kb = rope.rotate(k, np.array([b]))
        return float(qa[0, 0] @ kb[0, 0])

    for shift in [(3, 0), (0, 5), (7, 2), (40, 90)]:
        for a, b in [((1, 2), (4, 0)), ((0, 0), (2, 3)), ((5, 5), (5, 1))]:
            moved = score((a[0] + shift[0], a[1] + shift[1]), (b[0] + shift[0], b[1] + shift[1]))
            assert moved == pytest.approx(score(a, b), rel=1e-12, abs=1e-12)
    # a pure row offset and a pure column offset are not interchangeable
    assert score((0, 0), (0, 3)) != pytest.approx(score((0, 0), (3, 0)))


def test_axial_halves(backend_dtype) -> None:
    """First half of the pairs: a 16-wide RoPE by row; second half: by column."""
    backend, dtype = backend_dtype
    rope = anyrope.RoPE(32, scaling=AXIAL)
    half = anyrope.RoPE(16)
    positions = _patches(4)  # 16 patches
    x = backend.from_numpy(_x((2, 16, 3, 32), dtype))
    got = backend.to_numpy(rope.rotate(x, backend.from_numpy(positions)))
    for axis, pairs in ((0, range(8)), (1, range(8, 16))):
        features = _pair_features(pairs, 32, interleaved=False)
        part = backend.from_numpy(backend.to_numpy(x)[..., features].astype(numpy_dtype(dtype)))
        expected = backend.to_numpy(
            half.rotate(part, backend.from_numpy(np.ascontiguousarray(positions[:, axis])))
        )
        np.testing.assert_array_equal(got[..., features], expected)


def test_axial_tables_and_errors() -> None:
    rope = anyrope.RoPE(32, scaling=AXIAL)
    assert rope.sections == (8, 8)
    np.testing.assert_array_equal(rope.inv_freq[:8], anyrope.RoPE(16).inv_freq)
    np.testing.assert_array_equal(rope.inv_freq[8:], anyrope.RoPE(16).inv_freq)
    cos, _ = rope.tables(_patches(3), dtype=np.float32)
    assert cos.shape == (9, 16)
    x = _x((9, 1, 32))
    with pytest.raises(ValueError, match=r"2D axial `positions` must have shape"):
        rope.rotate(x, np.zeros((9, 3), dtype=np.int64))
    with pytest.raises(TypeError, match=r"for 2D axial RoPE; got NoneType"):
        rope.rotate(x)
    with pytest.raises(ValueError, match=r"multiple of 4"):
        anyrope.RoPE(32, rotary_dim=30, scaling=AXIAL)
    with pytest.raises(ValueError, match=r"`mrope_section` does not apply to rope_type='axial'"):
        anyrope.RoPE(32, scaling={**AXIAL, "mrope_section": [8, 8]})
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., 2\)"):
        rope.tables(np.zeros((4, 3), dtype=np.int64), dtype=np.float32)
    assert "scaling=RopeScaling(rope_type='axial')" in repr(rope)
