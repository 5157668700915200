"""anyrope agrees with two independent float64 oracles on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import anyrope
from oracles import complex_rotation, dense_rotation


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, 10], ids=["full", "partial"])
@pytest.mark.parametrize("oracle", [dense_rotation, complex_rotation], ids=["dense", "complex"])
def test_matches_float64_oracle(backend, interleaved, rotary_dim, oracle):
    if "float64" not in backend.dtype_names:
        pytest.skip(f"{backend.name} has no float64")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 3, 16))
    positions = rng.integers(0, 100_000, size=(2, 6))
    expected = oracle(x, positions, rotary_dim=rotary_dim, base=500000.0, interleaved=interleaved)
    got = anyrope.rotate(
        backend.from_numpy(x),
        backend.from_numpy(positions),
        rotary_dim=rotary_dim,
        base=500000.0,
        interleaved=interleaved,
    )
    np.testing.assert_allclose(backend.to_numpy(got), expected, rtol=0, atol=1e-12)


def test_oracles_agree_with_each_other():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 2, 12))
    positions = np.arange(4) * 1000
    for interleaved in (False, True):
        a = dense_rotation(x, positions, rotary_dim=8, interleaved=interleaved)
        b = complex_rotation(x, positions, rotary_dim=8, interleaved=interleaved)
        np.testing.assert_allclose(a, b, atol=1e-12)
