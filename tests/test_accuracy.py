"""Half-precision outputs stay within 0.51 ulp of a float64 oracle at long positions."""

from __future__ import annotations

import numpy as np
import pytest

import anyrope
from anyrope.tools._backends import float32_to_bfloat16_bits
from anyrope.tools.check import _max_ulp_error as max_ulp_error
from anyrope.tools.check import _ulp as ulp
from oracles import complex_rotation


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6])
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_within_half_ulp(backend, dtype, base, interleaved):
    if dtype not in backend.dtype_names:
        pytest.skip(f"{backend.name} has no {dtype}")
    rng = np.random.default_rng(3)
    x32 = rng.standard_normal((4, 64, 2, 128)).astype(np.float32)
    if dtype == "float16":
        data = backend.from_numpy(x32.astype(np.float16))
    else:
        data = backend.from_bits(float32_to_bfloat16_bits(x32), "bfloat16")
    x = backend.to_numpy(data).astype(np.float64)
    positions = rng.integers(0, 2**20, size=(4, 64))
    y = anyrope.rotate(data, backend.from_numpy(positions), base=base, interleaved=interleaved)
    reference = complex_rotation(x, positions, rotary_dim=128, base=base, interleaved=interleaved)
    error = max_ulp_error(
        backend.to_numpy(y), reference, x, dtype=dtype, rotary_dim=128, interleaved=interleaved
    )
    assert error <= 0.51


def test_ulp_spacing():
    assert ulp(np.array(1.0), "float16") == 2.0**-10
    assert ulp(np.array(1.5), "bfloat16") == 2.0**-7
    assert ulp(np.array(0.0), "float32") == 2.0**-149
    assert ulp(np.array(1024.0), "float64") == 2.0**-42
