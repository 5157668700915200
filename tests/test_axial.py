"""Axial RoPE on ``n`` axes (``axial_sections``): video ``(time, row, column)`` grids and
unequal sections, against a float64 oracle, each axis's own RoPE, every path and
rotary-embedding-torch's ``get_axial_freqs``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anyrope
from anyrope._paths import numba_cpu
from anyrope.scaling import RopeScaling, axial
from anyrope.tools._backends import numpy_dtype
from oracles import axial_rotation

# (head_dim, rotary_dim, pairs per axis)
CASES = {
    "3d-equal": (24, 24, (4, 4, 4)),
    # Wan 2.1's split of a 40-wide head: t = 40 - 4 * (40 // 6) = 16 features, h = w = 12
    "3d-wan": (40, 40, (8, 6, 6)),
    "3d-partial": (48, 40, (8, 6, 6)),
    "4d-unequal": (16, 16, (3, 1, 2, 2)),
    "2d-unequal": (16, 16, (5, 3)),
}
CASE_IDS = list(CASES)


def _rope(case: str, *, interleaved: bool = False, base: float = 10000.0) -> anyrope.RoPE:
    head_dim, rotary_dim, sections = CASES[case]
    return anyrope.RoPE(
        head_dim,
        rotary_dim=rotary_dim,
        base=base,
        interleaved=interleaved,
        scaling={"rope_type": "axial", "axial_sections": list(sections)},
    )


def _grid(*sizes: int) -> np.ndarray:
    """Every point of a grid of these sizes, ``(prod(sizes), len(sizes))``, row-major."""
    axes = np.meshgrid(*(np.arange(n) for n in sizes), indexing="ij")
    return np.stack([a.ravel() for a in axes], axis=-1)


def _pair_features(pairs: range, rotary_dim: int, interleaved: bool) -> list[int]:
    if interleaved:
        return [f for i in pairs for f in (2 * i, 2 * i + 1)]
    return [*pairs, *(i + rotary_dim // 2 for i in pairs)]


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("case", CASE_IDS)
def test_matches_float64_oracle(backend, case: str, interleaved: bool) -> None:
    if "float64" not in backend.dtype_names:
        pytest.skip(f"{backend.name} has no float64")
    head_dim, rotary_dim, sections = CASES[case]
    rng = np.random.default_rng(len(sections))
    x = rng.standard_normal((2, 7, 3, head_dim))
    positions = rng.integers(0, 100_000, size=(2, 7, len(sections)))
    rope = _rope(case, interleaved=interleaved, base=500000.0)
    got = backend.to_numpy(rope.rotate(backend.from_numpy(x), backend.from_numpy(positions)))
    expected = axial_rotation(
        x[..., :rotary_dim], positions, sections=sections, base=500000.0, interleaved=interleaved
    )
    np.testing.assert_allclose(got[..., :rotary_dim], expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("case", CASE_IDS)
def test_each_axis_is_a_rope_of_its_own_width(backend_dtype, case: str, interleaved: bool) -> None:
    """The pairs of axis ``a`` equal, bit for bit, a ``2 p_a``-wide RoPE by coordinate ``a``."""
    backend, dtype = backend_dtype
    head_dim, rotary_dim, sections = CASES[case]
    rng = np.random.default_rng(7)
    host = rng.standard_normal((2, 9, 2, head_dim)).astype(numpy_dtype(dtype))
    positions = rng.integers(0, 5000, size=(9, len(sections)))  # one grid for the batch
    rope = _rope(case, interleaved=interleaved)
    got = backend.to_numpy(rope.rotate(backend.from_numpy(host), backend.from_numpy(positions)))
    reference = backend.to_numpy(backend.from_numpy(host))
    start = 0
    for axis, pairs in enumerate(sections):
        features = _pair_features(range(start, start + pairs), rotary_dim, interleaved)
        own = anyrope.RoPE(2 * pairs, interleaved=interleaved)
        part = backend.from_numpy(np.ascontiguousarray(host[..., features]))
        coordinate = backend.from_numpy(np.ascontiguousarray(positions[:, axis]))
        expected = backend.to_numpy(own.rotate(part, coordinate))
        np.testing.assert_array_equal(got[..., features], expected)
        start += pairs
    np.testing.assert_array_equal(got[..., rotary_dim:], reference[..., rotary_dim:])


@pytest.mark.parametrize("impl", ["blocked", "numba"])
@pytest.mark.parametrize("case", ["3d-wan", "3d-partial", "4d-unequal"])
def test_cpu_paths_give_the_reference_bits(backend_dtype, case: str, impl: str) -> None:
    backend, dtype = backend_dtype
    if backend.name not in ("numpy", "torch") or backend.device_label != "cpu":
        pytest.skip(f"the {impl} path takes NumPy arrays and PyTorch CPU tensors only")
    if impl == "numba" and not numba_cpu.installed():
        pytest.skip("numba is not installed")
    head_dim, _, sections = CASES[case]
    rng = np.random.default_rng(11)
    q = backend.from_numpy(rng.standard_normal((2, 12, 4, head_dim)).astype(numpy_dtype(dtype)))
    k = backend.from_numpy(rng.standard_normal((2, 12, 1, head_dim)).astype(numpy_dtype(dtype)))
    positions = backend.from_numpy(rng.integers(0, 10**6, size=(2, 12, len(sections))))
    for interleaved in (False, True):
        rope = _rope(case, interleaved=interleaved)
        want = rope(q, k, positions, impl="array_api")
        got = rope(q, k, positions, impl=impl)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(backend.to_bits(a), backend.to_bits(b))


def test_cuda_and_dask_say_why_they_refuse_several_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyrope._call import make_call
    from anyrope._paths import cuda
    from anyrope._plan import make_plan

    # The arrays stand in for device arrays: only the streams are left to reject.
    monkeypatch.setattr(cuda, "cuda_array", lambda x: True)
    monkeypatch.setattr(cuda, "_cupy_installed", lambda: True)
    rope = _rope("3d-wan")
    plan = make_plan(
        rope._source,
        make_call(
            (np.zeros((1, 4, 2, 40)),),
            ("x",),
            np.zeros((4, 3), dtype=np.int64),
            layout="bshd",
            inverse=False,
            inplace=False,
            impl="auto",
            xp=None,
            cu_seqlens=None,
        ),
        head_dim=40,
        interleaved=False,
    )
    assert len(plan.where) == 3
    assert "one position stream" in cuda.rejects(plan)
    da = pytest.importorskip("dask.array", reason="dask is not installed")
    with pytest.raises(ValueError, match=r"one position stream; got rope_type='axial' with 3"):
        rope.rotate(da.zeros((1, 4, 2, 40), chunks=2), np.zeros((4, 3), dtype=np.int64))


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("case", CASE_IDS)
def test_jax_eager_bits_and_jit_with_traced_positions(case: str, interleaved: bool) -> None:
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    jnp = pytest.importorskip("jax.numpy")
    head_dim, rotary_dim, sections = CASES[case]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 20, 2, head_dim))
    positions = rng.integers(0, 10**5, size=(3, 20, len(sections)))
    rope = _rope(case, interleaved=interleaved)
    expected = axial_rotation(
        x[..., :rotary_dim], positions, sections=sections, interleaved=interleaved
    )
    with jax.enable_x64(True):
        for dtype in (np.float32, np.float64):
            eager = rope.rotate(jnp.asarray(x.astype(dtype)), jnp.asarray(positions))
            np.testing.assert_array_equal(
                np.asarray(eager), rope.rotate(x.astype(dtype), positions)
            )
        traced = jax.jit(rope.rotate)(jnp.asarray(x), jnp.asarray(positions))
        per_clip = jax.jit(jax.vmap(rope.rotate))(jnp.asarray(x), jnp.asarray(positions))
    # Under jit XLA may fuse multiply-adds: agreement with the oracle, not bits.
    for got in (np.asarray(traced), np.asarray(per_clip)):
        np.testing.assert_allclose(got[..., :rotary_dim], expected, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


def test_torch_gradient_is_the_inverse_rotation() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rng = np.random.default_rng(6)
    rope = _rope("3d-partial")
    x = torch.from_numpy(rng.standard_normal((2, 8, 3, 48))).requires_grad_()
    upstream = torch.from_numpy(rng.standard_normal((2, 8, 3, 48)))
    positions = torch.from_numpy(rng.integers(0, 1000, size=(2, 8, 3)))
    (rope.rotate(x, positions) * upstream).sum().backward()
    assert x.grad is not None
    expected = rope.rotate(upstream, positions, inverse=True)
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("offsets", [(0, 0, 0), (3, 1, 7)], ids=["origin", "offsets"])
def test_matches_rotary_embedding_torch_get_axial_freqs(offsets: tuple[int, int, int]) -> None:
    """rotary-embedding-torch ``RotaryEmbedding(dim=D, freqs_for="lang")`` with
    ``get_axial_freqs(T, H, W)`` is ``axial_sections=[D // 2] * 3`` on a ``3 D`` rotary
    width, interleaved pairs; its float32 frequencies and angles set the tolerance."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rotary = pytest.importorskip(
        "rotary_embedding_torch", reason="rotary-embedding-torch is not installed"
    )
    dim, (t, h, w), head_dim = 16, (3, 4, 5), 56
    embedding = rotary.RotaryEmbedding(dim=dim, freqs_for="lang")
    freqs = embedding.get_axial_freqs(t, h, w, offsets=offsets)  # (t, h, w, 3 * dim)
    video = torch.randn(2, t, h, w, head_dim, generator=torch.Generator().manual_seed(0))
    expected = rotary.apply_rotary_emb(freqs, video)

    rope = anyrope.RoPE(
        head_dim,
        rotary_dim=3 * dim,
        interleaved=True,
        scaling={"rope_type": "axial", "axial_sections": [dim // 2] * 3},
    )
    tokens = video.reshape(2, t * h * w, 1, head_dim)  # bshd, one head
    positions = torch.from_numpy(_grid(t, h, w) + np.array(offsets))
    got = rope.rotate(tokens, positions).reshape(video.shape)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_score_depends_only_on_the_offset_per_axis() -> None:
    rope = _rope("3d-wan")
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 1, 40)), rng.standard_normal((1, 1, 40))

    def score(a: tuple[int, ...], b: tuple[int, ...]) -> float:
        qa = rope.rotate(q, np.array([a]))
        kb = rope.rotate(k, np.array([b]))
        return float(qa[0, 0] @ kb[0, 0])

    pairs = [((1, 2, 3), (4, 0, 2)), ((0, 0, 0), (2, 3, 9)), ((5, 5, 5), (5, 1, 0))]
    for shift in [(3, 0, 0), (0, 5, 0), (0, 0, 11), (7, 2, 40), (900, 60, 3)]:
        for a, b in pairs:
            moved = score(tuple(np.add(a, shift)), tuple(np.add(b, shift)))
            assert moved == pytest.approx(score(a, b), rel=1e-12, abs=1e-12)
    # Each axis turns its own pairs: offsets along different axes are not interchangeable.
    along = [score((0, 0, 0), offset) for offset in [(3, 0, 0), (0, 3, 0), (0, 0, 3)]]
    assert along[0] != pytest.approx(along[1])
    assert along[0] != pytest.approx(along[2])


@settings(max_examples=40, deadline=None)
@given(
    sections=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    interleaved=st.booleans(),
    extra=st.sampled_from([0, 2]),
    seq=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_each_axis_follows_its_coordinate(
    sections: list[int], interleaved: bool, extra: int, seq: int, seed: int
) -> None:
    """Any axes and sections: each axis's pairs are its own RoPE, the rest is copied."""
    rotary_dim = 2 * sum(sections)
    head_dim = rotary_dim + extra
    rope = anyrope.RoPE(
        head_dim,
        rotary_dim=rotary_dim,
        interleaved=interleaved,
        scaling={"rope_type": "axial", "axial_sections": sections},
    )
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((seq, 2, head_dim)).astype(np.float32)
    positions = rng.integers(0, 2**40, size=(seq, len(sections)))
    got = rope.rotate(x, positions)
    cos, _ = rope.tables(positions, dtype=np.float64)
    assert cos.shape == (seq, rotary_dim // 2)
    start = 0
    for axis, pairs in enumerate(sections):
        features = _pair_features(range(start, start + pairs), rotary_dim, interleaved)
        own = anyrope.RoPE(2 * pairs, interleaved=interleaved)
        np.testing.assert_array_equal(
            got[..., features],
            own.rotate(np.ascontiguousarray(x[..., features]), positions[:, axis].copy()),
        )
        own_cos, _ = own.tables(positions[:, axis].copy(), dtype=np.float64)
        np.testing.assert_array_equal(cos[:, start : start + pairs], own_cos)
        start += pairs
    np.testing.assert_array_equal(got[..., rotary_dim:], x[..., rotary_dim:])


def test_two_equal_halves_are_the_2d_default_bit_for_bit() -> None:
    plain = anyrope.RoPE(32, scaling={"rope_type": "axial"})
    explicit = anyrope.RoPE(32, scaling={"rope_type": "axial", "axial_sections": [8, 8]})
    assert plain.sections == explicit.sections == (8, 8)
    np.testing.assert_array_equal(plain.inv_freq.view(np.uint64), explicit.inv_freq.view(np.uint64))
    x = np.random.default_rng(1).standard_normal((16, 2, 32)).astype(np.float32)
    np.testing.assert_array_equal(plain.rotate(x, _grid(4, 4)), explicit.rotate(x, _grid(4, 4)))


def test_settings_tables_and_pickling() -> None:
    rope = _rope("3d-wan")
    assert rope.axial
    assert rope.sections == (8, 6, 6)
    assert "axial_sections=(8, 6, 6)" in repr(rope)
    np.testing.assert_array_equal(
        rope.inv_freq,
        np.concatenate([anyrope.RoPE(width).inv_freq for width in (16, 12, 12)]),
    )
    np.testing.assert_array_equal(
        axial.inv_freq(40, 10000.0, axial_sections=[8, 6, 6]), rope.inv_freq
    )
    cos, sin = rope.tables(_grid(2, 3, 4).reshape(2, 12, 3), dtype=np.float32)
    assert cos.shape == sin.shape == (2, 12, 20)
    # A list given directly becomes a tuple, so the description hashes (dask, pickling).
    scaling = RopeScaling("axial", axial_sections=[8, 6, 6])  # type: ignore[arg-type]
    assert scaling.axial_sections == (8, 6, 6)
    assert hash(scaling) == hash(RopeScaling("axial", axial_sections=(8, 6, 6)))
    clone = pickle.loads(pickle.dumps(rope))
    x = np.ones((12, 1, 40))
    np.testing.assert_array_equal(clone.rotate(x, _grid(2, 2, 3)), rope.rotate(x, _grid(2, 2, 3)))
    # No multiple of 4 is needed once the sections are given.
    assert anyrope.RoPE(
        6, scaling={"rope_type": "axial", "axial_sections": [1, 1, 1]}
    ).sections == (
        1,
        1,
        1,
    )


def test_plot_names_each_axis() -> None:
    from anyrope.scaling import from_hf_config
    from anyrope.tools._cli import describe_plot

    settings = from_hf_config(
        {
            "hidden_size": 480,
            "num_attention_heads": 12,
            "rope_parameters": {
                "rope_type": "axial",
                "rope_theta": 10000.0,
                "axial_sections": [8, 6, 6],
            },
        }
    )
    content = describe_plot(settings, None)
    assert "axial (axis 0 8, axis 1 6, axis 2 6 pairs)" in content.title
    assert content.sections == [(0, 8, "axis 0"), (8, 14, "axis 1"), (14, 20, "axis 2")]


@pytest.mark.parametrize(
    ("scaling", "error", "message"),
    [
        (
            {"axial_sections": [8, 6, 5]},
            ValueError,
            r"must sum to rotary_dim // 2 = 20; got \[8, 6, 5\] \(sum 19\)",
        ),
        (
            {"axial_sections": [8, 0, 12]},
            ValueError,
            r"`axial_sections\[1\]` must be a positive integer",
        ),
        ({"axial_sections": [8, 6.0, 6]}, TypeError, r"`axial_sections\[1\]` must be an integer"),
        ({"axial_sections": "866"}, TypeError, r"`axial_sections` must be a list of integers"),
        (
            {"rope_type": "default", "axial_sections": [8, 6, 6]},
            ValueError,
            r"does not use `axial_sections`",
        ),
    ],
    ids=["sum", "zero", "float", "string", "not-axial"],
)
def test_section_errors(scaling: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        anyrope.RoPE(40, scaling={"rope_type": "axial", **scaling})


def test_a_description_with_sections_for_another_method_is_refused() -> None:
    with pytest.raises(ValueError, match=r"rope_type='linear' does not use `axial_sections`"):
        RopeScaling("linear", factor=2.0, axial_sections=(2, 2))


@pytest.mark.parametrize(
    ("positions", "error", "message"),
    [
        (
            np.zeros((12, 2), dtype=np.int64),
            ValueError,
            r"3D axial `positions` must have shape \(\*batch, seq, 3\)",
        ),
        (
            np.zeros((12,), dtype=np.int64),
            ValueError,
            r"3D axial `positions` must have shape \(\*batch, seq, 3\)",
        ),
        (None, TypeError, r"shape \(\*batch, seq, 3\) for 3D axial RoPE; got NoneType"),
        (5, TypeError, r"for 3D axial RoPE; got int"),
        (-np.ones((12, 3), dtype=np.int64), ValueError, r"non-negative"),
        (np.zeros((12, 3)), TypeError, r"integer dtype"),
    ],
    ids=["two-coordinates", "no-coordinate-axis", "none", "offset", "negative", "float"],
)
def test_position_errors(positions: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        _rope("3d-wan").rotate(np.zeros((12, 1, 40)), positions)


def test_table_position_errors() -> None:
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., 3\) for 3D axial RoPE"):
        _rope("3d-wan").tables(np.zeros((4, 2), dtype=np.int64), dtype=np.float32)
