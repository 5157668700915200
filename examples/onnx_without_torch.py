"""RoPE exported to an ONNX model without torch, with ndonnx, and run by ONNX Runtime.

ndonnx is an array-API library whose arrays build an ONNX graph: anyrope's reference
path, written once against the array API, becomes the graph. The batch and sequence
dimensions are symbolic and the positions are a graph input: the tables of
``max_positions`` are constants in the model, and each call gathers its rows inside the
graph. The script checks that ONNX Runtime gives NumPy's bits at several shapes, and NaN
for the token of a position outside the tables (a graph cannot raise).

Run: ``python examples/onnx_without_torch.py`` (needs ndonnx and onnxruntime; skips
without them).
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import anyrope


def main() -> int:
    missing = [name for name in ("ndonnx", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"skipped: {' and '.join(missing)} not installed")
        return 0
    import ndonnx as ndx
    import onnxruntime as ort

    rope = anyrope.RoPE(64, max_positions=4096)
    q = ndx.argument(shape=("batch", "seq", 8, 64), dtype=ndx.float16)
    positions = ndx.argument(shape=("batch", "seq"), dtype=ndx.int64)
    model = ndx.build({"q": q, "positions": positions}, {"q_rotated": rope.rotate(q, positions)})
    session = ort.InferenceSession(model.SerializeToString())

    rng = np.random.default_rng(0)
    for batch, seq in [(1, 1), (2, 17), (4, 128)]:
        q_host = rng.standard_normal((batch, seq, 8, 64)).astype(np.float16)
        p_host = rng.integers(0, 4096, size=(batch, seq))
        (y,) = session.run(None, {"q": q_host, "positions": p_host})
        expected = rope.rotate(q_host, p_host)
        assert np.array_equal(y.view(np.uint16), expected.view(np.uint16)), (batch, seq)
    print(f"ONNX Runtime {ort.__version__}: NumPy's bits at every shape (symbolic batch, seq)")

    p_host[0, 0] = 4096  # past the tables: the token's rotated features are NaN
    (y,) = session.run(None, {"q": q_host, "positions": p_host})
    assert np.isnan(y[0, 0]).all()
    assert not np.isnan(y[0, 1:]).any()
    print("a position outside max_positions gives NaN for its token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
