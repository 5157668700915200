"""The sinusoidal absolute encoding: formula, same bits everywhere, relation to RoPE tables."""

from __future__ import annotations

import numpy as np
import pytest

import anyrope
from anyrope.sinusoidal import sinusoidal
from anyrope.tools._backends import float32_to_bfloat16_bits, numpy_dtype


def test_formula_float64():
    """PE(m, 2i) = sin(m / 10000**(2i/d)), PE(m, 2i+1) = cos(m / 10000**(2i/d))."""
    dim = 16
    pe = sinusoidal(np.arange(1000), dim, dtype=np.float64)
    m = np.arange(1000, dtype=np.float64)[:, None]
    i = np.arange(dim // 2)
    np.testing.assert_allclose(pe[:, 0::2], np.sin(m / 10000 ** (2 * i / dim)), atol=1e-12)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(m / 10000 ** (2 * i / dim)), atol=1e-12)


def test_same_angles_as_rope_tables():
    """RoPE rotates by exactly the angles the sinusoidal encoding takes sines and cosines of."""
    positions = np.array([0, 1, 5, 4095, 10**6], dtype=np.int64)
    pe = sinusoidal(positions, 64, base=5e5, dtype=np.float64)
    cos, sin = anyrope.RoPE(64, base=5e5).tables(positions, dtype=np.float64)
    np.testing.assert_array_equal(pe[:, 0::2], sin)
    np.testing.assert_array_equal(pe[:, 1::2], cos)


def test_same_bits_on_every_backend(backend_dtype):
    backend, dtype = backend_dtype
    positions = np.array([[0, 3, 17], [2**20, 7, 123456]], dtype=np.int64)
    host = sinusoidal(positions, 32, dtype=np.float64)
    if dtype == "float64":
        expected = host
    elif dtype == "bfloat16":
        expected = float32_to_bfloat16_bits(host.astype(np.float32)).view(numpy_dtype(dtype))
    else:
        expected = host.astype(np.float32).astype(dtype)
    on_device = backend.from_numpy(np.zeros(1)).device
    p = backend.xp.asarray(positions, device=on_device)
    pe = sinusoidal(p, 32, dtype=backend.dtype(dtype))
    assert pe.dtype == backend.dtype(dtype)
    assert tuple(pe.shape) == (2, 3, 32)
    np.testing.assert_array_equal(
        backend.to_bits(pe), backend.to_bits(backend.from_numpy(expected))
    )


def test_count_means_arange(backend):
    xp = backend.xp
    by_count = sinusoidal(6, 8, dtype=xp.float32, xp=xp)
    positions = xp.arange(6, device=by_count.device)
    np.testing.assert_array_equal(
        backend.to_numpy(by_count), backend.to_numpy(sinusoidal(positions, 8, dtype=xp.float32))
    )


def test_count_defaults_to_numpy():
    pe = sinusoidal(3, 4, dtype=np.float32)
    assert isinstance(pe, np.ndarray)
    assert pe.dtype == np.float32


def test_errors():
    with pytest.raises(ValueError, match="`dim` must be a positive even integer"):
        sinusoidal(4, 7, dtype=np.float32)
    with pytest.raises(TypeError, match="`dim` must be an integer"):
        sinusoidal(4, 8.0, dtype=np.float32)
    with pytest.raises(TypeError, match="integer dtype"):
        sinusoidal(np.arange(4.0), 8, dtype=np.float32)
    with pytest.raises(TypeError, match="`dtype` must be a real floating"):
        sinusoidal(4, 8, dtype=np.int32)
    with pytest.raises(ValueError, match="`positions` must be a count from 0 to 2"):
        sinusoidal(-1, 8, dtype=np.float32)
    with pytest.raises(ValueError, match="2\\*\\*53"):
        sinusoidal(np.array([2**53]), 8, dtype=np.float64)
    with pytest.raises(TypeError, match="`positions`"):
        sinusoidal([1, 2], 8, dtype=np.float32)
