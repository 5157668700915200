import numpy as np

import anyrope


def test_same_bits_on_every_backend(backend_dtype):
    backend, dtype = backend_dtype
    rng = np.random.default_rng(0)
    x32 = rng.standard_normal((2, 7, 3, 16)).astype(np.float32)
    x = backend.from_numpy(x32.astype(np.float64)) if dtype == "float64" else None
    if x is None:
        from anyrope._backends import float32_to_bfloat16_bits

        bits = float32_to_bfloat16_bits(x32) if dtype == "bfloat16" else x32.astype(dtype).view(
            np.uint16 if dtype == "float16" else np.uint32
        )
        x = backend.from_bits(bits, dtype)
    reference = anyrope.rotate(backend.to_numpy(x).astype(np.float32 if dtype != "float64" else np.float64))
    got = backend.to_numpy(anyrope.rotate(x))
    if dtype == "float16":
        reference = reference.astype(np.float16)
    if dtype == "bfloat16":
        from anyrope._backends import bfloat16_bits_to_float32, float32_to_bfloat16_bits

        reference = bfloat16_bits_to_float32(float32_to_bfloat16_bits(reference))
    assert np.array_equal(got.view(np.uint8), reference.view(np.uint8))
