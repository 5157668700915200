"""Host time per call of the CUDA path on decode shapes, measured on a CPU (no GPU needed).

    python benchmarks/bench_cuda_host.py [--rounds 15] [--calls 2000] [--clock wall|cpu] \
        [--json PATH]

q (64, 1, 32, 128) and k (64, 1, 8, 128), bfloat16, layout ``bshd``: one new token per
sequence. Every line is timed in ONE run, round-robin (each round times every line once,
a sample being ``--calls`` back-to-back calls); the table gives the median over the rounds
and the interquartile range, in microseconds per call (``--clock cpu``: the thread's CPU
time, which leaves out the time spent waiting for a busy CPU), then how many times per
call each stand-in below was called.

What is measured, and what is not. The torch tensors are CPU tensors that stand in for
CUDA ones: ``anyrope._paths.cuda`` is told to take them (its ``cuda_array`` test, the CuPy
install check and the once-per-device compile check are replaced for the run), and the
driver call is a stand-in: ``cupy.cuda.driver.launchKernel`` (CuPy's binding of
``cuLaunchKernel``, the one call the path makes per launch) counts its calls, and so do
torch's stream lookups (``torch._C._cuda_getCurrentRawStream``, the raw handle, and
``torch.cuda.current_stream``) and ``Tensor.record_stream``, which return at once. The
kernels' ``CUfunction`` are put in the path's own table. So a line times the whole host
side of ``rope(q, k, positions)`` with ``impl="cuda"``, anyrope's launch code included:
the geometry lookup and, for the first call of a geometry or a step past the rows of
its tables, the plan, the position checks and the table lookup (the other steps run the
launches bound to the tables of the step before: docs/architecture.rst), the output
allocation (``torch.empty`` on the CPU allocator instead of the CUDA caching allocator),
the bound launch and its buffer, the kernel lookup. Not measured: the driver's own work
in ``cuLaunchKernel`` (about 2 to 3 us on an H100 or H200), the work of torch's stream
lookups and ``record_stream`` in a CUDA build (a ``torch.cuda.current_stream`` call makes
a ``torch.cuda.Stream``: see the counts), CuPy's ``Device`` switch, and the kernel itself.
With a positions tensor, the host range check reads a CPU tensor here; on a GPU that
check is a device synchronisation.

* ``anyrope offset``: ``rope(q, k, positions=1000, impl="cuda")`` (a KV-cache offset).
* ``anyrope tensor, max_positions``: ``rope(q, k, positions=p, impl="cuda")`` with
  ``rope = RoPE(128, max_positions=4096)``, ``p`` of shape (64, 1), int64, one position
  per sequence. The positions are never read on the host (the kernel checks them): no
  device synchronisation, as ``tests/test_cuda_source.py`` proves with a torch dispatch
  mode that sees every value brought to the host.
* ``anyrope tensor``: the same with ``RoPE(128)``, which reads the positions to check
  them (on a GPU, a synchronisation: it waits for all queued work).
* ``launch planning``: the CUDA path's ``rotate_raw`` on a plan made once (the part of the
  call that the kernel path owns: tables, outputs, launch plan, packed arguments).
* ``outputs and launch``: what no launch from Python can skip, for scale: the two
  ``torch.empty_like``, the addresses, the launch's buffer bound from its template and
  ``launch_on_device``.
* ``eager HF, batch 1``: the Hugging Face expression in torch eager,
  ``q * cos + rotate_half(q) * sin`` (and k), cos/sin gathered from (4096, 128) tables
  by a position tensor, for batch 1 (q (1, 1, 32, 128)) on the CPU, where its nine
  operations have almost nothing to compute: about the host time of model code before
  its kernel launches, which a GPU adds (a few microseconds each). A reference, not a
  like-for-like comparison.

torch runs with ``torch.set_num_threads(1)``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyrope
from anyrope.tools._benchmark import write_json

BATCH = 64
Q_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 128
POSITION = 1000
TABLE_LEN = 4096
#: The stand-ins whose calls the table counts, per call of each line.
COUNTED = ("launch", "raw stream", "current_stream", "record_stream")


@contextmanager
def cpu_tensors_as_cuda() -> Iterator[Counter[str]]:
    """The CUDA path takes torch CPU tensors and runs its own launch code to the end:
    only the driver's ``cuLaunchKernel`` (CuPy's binding of it) is a stand-in, which
    records nothing, with torch's stream lookups and ``record_stream``, which count their
    calls (the counter yielded) and return at once; the kernels' ``CUfunction`` are put
    in the path's own table, which the launches look them up in."""
    import torch

    from anyrope import _positions
    from anyrope._paths import cuda
    from anyrope._paths.cuda import _module

    names = ("cuda_array", "_cupy_installed", "unusable", "_device_id")
    saved = [getattr(cuda, name) for name in names]
    saved_pointers = dict(_module._pointers)
    saved_waits = _positions.waits_for_device
    saved_stream = torch.cuda.current_stream
    saved_record = torch.Tensor.record_stream
    saved_cupy = sys.modules.get("cupy")
    calls: Counter[str] = Counter()

    class Device:
        def __init__(self, device_id: int) -> None:
            pass

        def __enter__(self) -> None:
            pass

        def __exit__(self, *exc: object) -> None:
            pass

    def launch_kernel(*args: int) -> None:
        calls["launch"] += 1

    def current_stream(device: object = None) -> Any:
        calls["current_stream"] += 1
        return stream

    def raw_stream(device: int) -> int:
        calls["raw stream"] += 1
        return 0

    def record_stream(self: Any, on: object) -> None:
        calls["record_stream"] += 1

    fake = types.ModuleType("cupy")
    fake.ndarray = type("ndarray", (), {})  # type: ignore[attr-defined]  # asked by array-api-compat
    fake.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device, driver=types.SimpleNamespace(launchKernel=launch_kernel)
    )
    stream = types.SimpleNamespace(cuda_stream=0)
    sys.modules["cupy"] = fake
    cuda.cuda_array = lambda x: True  # type: ignore[assignment]
    cuda._cupy_installed = lambda: True  # type: ignore[assignment]
    cuda.unusable = lambda device_id: None  # type: ignore[assignment]
    cuda._device_id = lambda x: 0  # type: ignore[assignment]
    for variant in _module._variants("bfloat16"):  # CPU tensors are on "device" -1
        _module._pointers[(-1, "bfloat16", *variant)] = 1
    torch.cuda.current_stream = current_stream  # type: ignore[assignment]
    torch._C._cuda_getCurrentRawStream = raw_stream  # type: ignore[attr-defined]  # a CUDA build's
    torch.Tensor.record_stream = record_stream  # type: ignore[assignment,method-assign]
    _positions.waits_for_device = lambda values: True  # as on a GPU
    try:
        yield calls
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(cuda, name, value)
        _module._pointers.clear()
        _module._pointers.update(saved_pointers)
        _positions.waits_for_device = saved_waits
        torch.cuda.current_stream = saved_stream  # type: ignore[assignment]
        del torch._C._cuda_getCurrentRawStream  # type: ignore[attr-defined]
        torch.Tensor.record_stream = saved_record  # type: ignore[method-assign]
        if saved_cupy is None:
            del sys.modules["cupy"]
        else:
            sys.modules["cupy"] = saved_cupy


def cases(torch: Any) -> dict[str, Callable[[], object]]:
    from anyrope._call import make_call
    from anyrope._paths.cuda.dispatch import launch_on_device, rotate_raw
    from anyrope._plan import make_plan, with_tables

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(BATCH, 1, Q_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    k = torch.randn(BATCH, 1, KV_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    positions = torch.full((BATCH, 1), POSITION, dtype=torch.int64)
    rope = anyrope.RoPE(HEAD_DIM)
    ahead = anyrope.RoPE(HEAD_DIM, max_positions=TABLE_LEN)
    plan = make_plan(
        rope._source,
        make_call(
            (q, k),
            ("q", "k"),
            positions,
            layout="bshd",
            inverse=False,
            inplace=False,
            impl="auto",
            xp=None,
            cu_seqlens=None,
        ),
        head_dim=HEAD_DIM,
        interleaved=False,
    )
    plan = with_tables(plan, rope._source, "rows")

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
    angles = torch.arange(TABLE_LEN, dtype=torch.float64)[:, None] * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    table_cos, table_sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    q_one, k_one, positions_one = q[:1], k[:1], positions[:1]

    def rotate_half(x: Any) -> Any:
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def eager() -> tuple[Any, Any]:
        cos = table_cos[positions_one].unsqueeze(2)  # (1, 1, 1, 128)
        sin = table_sin[positions_one].unsqueeze(2)
        return q_one * cos + rotate_half(q_one) * sin, k_one * cos + rotate_half(k_one) * sin

    rotate_raw(plan, plan.arrays, launcher=launch_on_device)
    (templates,) = plan.memo["cuda"].values()

    def outputs_and_launch() -> tuple[Any, Any]:
        q2, k2 = torch.empty_like(q), torch.empty_like(k)
        io = (q.data_ptr(), q2.data_ptr(), k.data_ptr(), k2.data_ptr())
        launches = [template.bind(io, 0, POSITION) for template in templates]
        launch_on_device(q, "bfloat16", launches, (plan.tables.cos, plan.tables.sin))
        return q2, k2

    return {
        "anyrope offset": lambda: rope(q, k, positions=POSITION, impl="cuda"),
        "anyrope tensor, max_positions": lambda: ahead(q, k, positions=positions, impl="cuda"),
        "anyrope tensor": lambda: rope(q, k, positions=positions, impl="cuda"),
        "launch planning": lambda: rotate_raw(plan, plan.arrays, launcher=launch_on_device),
        "outputs and launch": outputs_and_launch,
        "eager HF, batch 1": eager,
    }


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: this thread's CPU time, which leaves out waiting for a busy CPU",
    )
    args = parser.parse_args(argv)
    clock = time.perf_counter_ns if args.clock == "wall" else time.thread_time_ns

    import torch

    torch.set_num_threads(1)
    with cpu_tensors_as_cuda() as calls:
        lines = cases(torch)
        for fn in lines.values():  # warm up: plans, tables, kernels' launch plans
            fn()
        assert calls["launch"], "the CUDA path did not reach the launcher"
        samples: dict[str, list[float]] = {name: [] for name in lines}
        counts: dict[str, Counter[str]] = {}
        for _ in range(args.rounds):
            for name, fn in lines.items():
                calls.clear()
                start = clock()
                for _ in range(args.calls):
                    fn()
                samples[name].append((clock() - start) / args.calls / 1e3)
                counts[name] = calls.copy()

    print(f"q ({BATCH}, 1, {Q_HEADS}, {HEAD_DIM}) + k ({BATCH}, 1, {KV_HEADS}, {HEAD_DIM}) bf16")
    print(f"{'line':<31}{'median us':>10}{'IQR us':>9}   per call: {', '.join(COUNTED)}")
    report = []
    for name, values in samples.items():
        q1, median, q3 = quartiles(values)
        per_call = [counts[name][what] / args.calls for what in COUNTED]
        print(f"{name:<31}{median:>10.1f}{q3 - q1:>9.1f}   {'  '.join(f'{n:g}' for n in per_call)}")
        report.append(
            {
                "line": name,
                "median_us": median,
                "iqr_us": q3 - q1,
                **{f"{what} per call": n for what, n in zip(COUNTED, per_call, strict=True)},
            }
        )
    if args.json is not None:
        write_json(args.json, {"rounds": args.rounds, "calls": args.calls, "results": report})


if __name__ == "__main__":
    main()
