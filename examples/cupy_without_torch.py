"""RoPE on CuPy arrays, with PyTorch nowhere in the process.

anyrope recognises CuPy arrays through array-api-compat and keeps them on the GPU: the
result is a CuPy array on the same device, bit-identical to the NumPy result for the
same inputs. The script checks both, and that PyTorch was never imported.

Run: ``python examples/cupy_without_torch.py`` (needs CuPy and a CUDA device; skips
without them).
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import anyrope


def main() -> int:
    if importlib.util.find_spec("cupy") is None:
        print("skipped: CuPy is not installed")
        return 0
    import cupy as cp

    try:
        devices = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError:
        devices = 0
    if devices == 0:
        print("skipped: no CUDA device")
        return 0

    rng = np.random.default_rng(0)
    q_host = rng.standard_normal((2, 256, 16, 128)).astype(np.float16)
    k_host = rng.standard_normal((2, 256, 4, 128)).astype(np.float16)
    offsets = np.array([[0], [300]])  # one start position per sequence (KV cache)

    q, k = cp.asarray(q_host), cp.asarray(k_host)
    q_rot, k_rot = anyrope.rotate_qk(q, k, cp.asarray(offsets) + cp.arange(256))
    assert isinstance(q_rot, cp.ndarray)
    assert q_rot.device == q.device
    assert q_rot.dtype == cp.float16

    q_ref, k_ref = anyrope.rotate_qk(q_host, k_host, offsets + np.arange(256))
    assert np.array_equal(q_rot.get().view(np.uint16), q_ref.view(np.uint16))
    assert np.array_equal(k_rot.get().view(np.uint16), k_ref.view(np.uint16))

    assert "torch" not in sys.modules, "PyTorch was imported"
    print(
        f"CuPy {cp.__version__} on device {q.device.id}: float16 q/k identical to NumPy, "
        "no PyTorch imported"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
