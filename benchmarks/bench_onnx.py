"""RoPE as an ONNX model (built by ndonnx, run by ONNX Runtime) next to anyrope on NumPy, CPU.

    python benchmarks/bench_onnx.py [--rounds 15] [--calls 200]

One model with symbolic batch and sequence and the positions as a graph input
(``RoPE(128, max_positions=4096)``, q of shape (B, S, 32, 128), layout ``bshd``), run at
a decode shape (B=32, S=1) and a prefill shape (B=1, S=512), float32 and float16, with
the same positions given to NumPy as an int64 array. Both are measured in the same
rounds, round-robin; the table gives the median over the rounds in microseconds per
call and the ratio ONNX Runtime / NumPy. Every output is checked bit for bit first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import ndonnx as ndx
import numpy as np
import onnxruntime as ort

import anyrope


def _time(call: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    rope = anyrope.RoPE(128, max_positions=4096)
    rng = np.random.default_rng(0)
    print(f"{'dtype':8} {'B':>3} {'S':>4} {'numpy us':>9} {'onnxrt us':>10} {'ratio':>6}")
    for dtype in ("float32", "float16"):
        q = ndx.argument(shape=("B", "S", 32, 128), dtype=getattr(ndx, dtype))
        positions = ndx.argument(shape=("B", "S"), dtype=ndx.int64)
        model = ndx.build({"q": q, "positions": positions}, {"y": rope.rotate(q, positions)})
        session = ort.InferenceSession(model.SerializeToString(), options)
        for batch, seq in ((32, 1), (1, 512)):
            q_host = rng.standard_normal((batch, seq, 32, 128)).astype(dtype)
            p_host = rng.integers(0, 4096, size=(batch, seq))
            feeds = {"q": q_host, "positions": p_host}

            def onnx(
                feeds: dict[str, np.ndarray] = feeds, session: ort.InferenceSession = session
            ) -> object:
                return session.run(None, feeds)[0]

            def numpy(q: np.ndarray = q_host, p: np.ndarray = p_host) -> object:
                return rope.rotate(q, p)

            assert np.array_equal(np.asarray(onnx()).view(np.uint8), numpy().view(np.uint8))
            calls = max(1, args.calls // seq)
            times: dict[str, list[float]] = {"numpy": [], "onnx": []}
            for _ in range(args.rounds):
                times["numpy"].append(_time(numpy, calls))
                times["onnx"].append(_time(onnx, calls))
            a, b = (statistics.median(times[name]) for name in ("numpy", "onnx"))
            print(f"{dtype:8} {batch:>3} {seq:>4} {a:9.1f} {b:10.1f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
