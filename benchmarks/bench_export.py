"""An exported RoPE next to eager anyrope: ``torch.export`` and ONNX Runtime, CPU.

    python benchmarks/bench_export.py [--rounds 15] [--calls 200]

A model's rotary step, ``rope(q, k, position_ids)`` with ``rope =
anyrope.RoPE(128, max_positions=8192)``, float32, layout ``bshd``, 32 query and 8 key
heads, on a decode shape (batch 8, one token at position 1000 + row) and a prefill
shape (batch 1, 512 tokens from 0). Exported once with dynamic batch and sequence, the
positions as an input; then, round-robin, each round times ``--calls`` calls of:

* ``eager``: the model called directly (anyrope's fastest CPU path);
* ``export``: ``torch.export.export(...).module()``, the gathered plain torch ops;
* ``onnxruntime``: ``torch.onnx.export(..., dynamo=True)`` run by an ONNX Runtime
  CPU session (skipped when onnxruntime is not installed).

The table gives the median over the rounds in microseconds per call and its ratio to
eager; every output is first checked to hold the eager bits. torch and ONNX Runtime use
two threads.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

import anyrope

SHAPES = {"decode": (8, 1), "prefill": (1, 512)}


class Rotary(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rope = anyrope.RoPE(128, max_positions=8192)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        return self.rope(q, k, positions)


def _inputs(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(batch, seq, 32, 128, generator=generator)
    k = torch.randn(batch, seq, 8, 128, generator=generator)
    start = 1000 if seq == 1 else 0
    positions = start + torch.arange(batch)[:, None] + torch.arange(seq)
    return q, k, positions


def _runners(model: Rotary) -> dict[str, Callable[..., tuple[np.ndarray, ...]]]:
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    dims = ({0: batch, 1: seq},) * 3
    example = _inputs(2, 5)
    module = torch.export.export(model, example, dynamic_shapes=dims).module()
    runners = {
        "eager": lambda *a: tuple(y.numpy() for y in model(*a)),
        "export": lambda *a: tuple(y.numpy() for y in module(*a)),
    }
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime as ort

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                model, example, dynamic_shapes=dims, dynamo=True, verbose=False
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        session = ort.InferenceSession(
            program.model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        names = [i.name for i in session.get_inputs()]
        runners["onnxruntime"] = lambda *a: tuple(
            session.run(None, dict(zip(names, (x.numpy() for x in a), strict=True)))
        )
    return runners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = Rotary()
    runners = _runners(model)
    print(f"{'shape':8} {'form':12} {'us/call':>10} {'x eager':>8}")
    for shape, (batch, seq) in SHAPES.items():
        inputs = _inputs(batch, seq)
        expected = runners["eager"](*inputs)
        for name, run in runners.items():
            for got, want in zip(run(*inputs), expected, strict=True):
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, run in runners.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    run(*inputs)
                times[name].append((time.perf_counter() - start) / args.calls * 1e6)
        eager = statistics.median(times["eager"])
        for name, samples in times.items():
            median = statistics.median(samples)
            print(f"{shape:8} {name:12} {median:10.1f} {median / eager:8.2f}")


if __name__ == "__main__":
    main()
