"""The kernel's launch shape against a device copy: heads per thread, registers and block
size, swept.

    python benchmarks/bench_gpu_launch.py [--out benchmarks/results]
    ncu --clock-control none --kernel-name regex:anyrope --launch-skip 4 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis python benchmarks/bench_gpu_launch.py --launches 5 \
        [--case "prefill bhsd"] [--dtype fp32]

The prefill cases of ``bench_gpu.py`` (bfloat16 bshd, bhsd, rotary 64 of 128 and
interleaved; float32 bshd, bhsd and interleaved) and the device time of a decode step
(64 tokens, replayed in a CUDA graph) under each launch configuration of
:data:`CONFIGS`: the heads one thread rotates (``geometry.HEADS_PER_THREAD`` and
``INTERLEAVED_HEADS_PER_THREAD``, which the kernel is compiled with; a configuration
that names them sets both), the least blocks of 256 threads that the kernel's
``__launch_bounds__`` asks to fit on a multiprocessor (which caps its registers) and the
most threads per block (``geometry.BLOCK``). For each: the registers per thread of the
variant that ran, the block and shared memory of its launch, the blocks that fit per SM
(``cuOccupancyMaxActiveBlocksPerMultiprocessor``), the device time (median, L2 flushed)
and the fraction of a device copy of the same bytes timed in the same run. The figures
that docs/performance.rst's launch model is checked against. Writes ``gpu-launch.json``
under ``--out``. ``--launches N`` only runs the kernel of one case N times (``--case``,
``--dtype``: bfloat16 prefill by default), for a profiler (the ``ncu`` command above).
Needs a CUDA GPU, PyTorch, CuPy and Triton.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gpu

_BOUNDS = "__launch_bounds__(256)"


class Config(NamedTuple):
    name: str
    heads: int | None = None  # heads per thread; None: as shipped
    edits: tuple[tuple[str, str], ...] = ()  # (text, replacement) in the kernel source
    block: int | None = None  # threads per block at most
    tokens: int | None = None  # tokens per block (blockDim.z) before heads; None: as shipped


CONFIGS: tuple[Config, ...] = (
    Config("as shipped"),
    Config("1 head per thread", heads=1),
    Config("2 heads per thread", heads=2),
    Config("4 heads per thread", heads=4),
    Config("8 heads per thread", heads=8),
    Config("launch bounds 256 x 3", edits=((_BOUNDS, "__launch_bounds__(256, 3)"),)),
    # Strong loads at CTA scope keep their order in the SASS (tests/test_cuda_sass.py's
    # check holds) but may be served by L1 (LDG.STRONG.SM, not .GPU): the two 16-byte
    # loads of a 16-bit interleaved unit share each 32-byte sector, which GPU-scope loads
    # fetch from the L2 twice. Measured on an H200: level with GPU scope (0.975 and 0.969
    # of a copy, bfloat16 interleaved pairs).
    Config("loads at CTA scope", edits=(("ld.relaxed.gpu.global", "ld.relaxed.cta.global"),)),
    # Several tokens per block, then as many heads as fit: in bhsd a head's tokens are
    # contiguous, so a block reads longer runs of memory (one token per block reads 40
    # runs of one row each). Measured once on an H200: bhsd 0.956 and 0.974 (bfloat16),
    # 0.953 and 0.962 (float32) against 0.967 and 0.949 as shipped; bshd fell to 0.95.
    Config("4 tokens per block", tokens=4),
    Config("8 tokens per block", tokens=8),
)
DTYPE_CASES = (
    ("bf16", "prefill"),
    ("bf16", "prefill bhsd"),
    ("bf16", "prefill rotary 64"),
    ("bf16", "prefill interleaved"),
    ("fp32", "prefill"),
    ("fp32", "prefill bhsd"),
    ("fp32", "prefill interleaved"),
    ("bf16", "decode b64"),
)
_GRAPH_CALLS = 32


def _graph_us(torch: Any, call: Any) -> float:
    """Device microseconds per call: ``_GRAPH_CALLS`` calls captured in one CUDA graph,
    the median of 20 replays (no host time in it)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(_GRAPH_CALLS):
            call()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(1000.0 * start.elapsed_time(end) / _GRAPH_CALLS)
    return statistics.median(times)


def _measure(torch: Any, timer: Any, dtype_key: str, case: bench_gpu.Case) -> dict[str, Any]:
    import cupy

    import anyrope
    from anyrope._paths.cuda import _module, geometry

    dtype = getattr(torch, bench_gpu.DTYPES[dtype_key])
    q_shape, k_shape = bench_gpu._shapes(case)
    q = torch.randn(q_shape, device="cuda").to(dtype)
    k = torch.randn(k_shape, device="cuda").to(dtype)
    q_copy, k_copy = torch.empty_like(q), torch.empty_like(k)
    rope = bench_gpu.make_rope(anyrope, case)
    positions = bench_gpu._positions(torch, case) if case.decode else None
    time = (lambda fn: _graph_us(torch, fn)) if case.decode else timer
    copy_us = time(lambda: (q_copy.copy_(q), k_copy.copy_(k)))
    kernel_us = time(lambda: rope(q, k, positions, layout=case.layout, impl="cuda"))
    (launch,) = _launch(geometry, q, q_copy, k, k_copy, case)
    kernel = _module.get_kernel(
        torch.cuda.current_device(),
        bench_gpu.DTYPES[dtype_key],
        width=launch.width,
        interleaved=launch.interleaved,
        wide_index=launch.wide_index,
    )
    per_thread = (
        geometry.INTERLEAVED_HEADS_PER_THREAD if case.interleaved else geometry.HEADS_PER_THREAD
    )[q.element_size()]
    block, shared = launch.block, launch.shared
    threads = block[0] * block[1] * block[2]
    try:
        blocks_per_sm: int | str = int(
            cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                kernel.kernel.ptr, threads, shared
            )
        )
    except Exception as error:  # a figure missing, never the run
        blocks_per_sm = f"unknown ({type(error).__name__}: {error})"
    return {
        "dtype": dtype_key,
        "case": case.name,
        "heads per thread": per_thread,
        "registers": int(kernel.num_regs),
        "block": block,
        "shared bytes": shared,
        "blocks per SM": blocks_per_sm,
        "copy us": copy_us,
        "kernel us": kernel_us,
        "fraction of copy": copy_us / kernel_us,
    }


def _launch(geometry: Any, *arrays: Any) -> Any:
    """The launch templates the CUDA path plans for ``q, q_out, k, k_out`` of a case out of
    place, as ``rope(q, k, layout=...)`` plans them: the variant, block and shared memory
    of the launch that ran (a decode step's positions tensor changes neither). q's address
    stands in for the tables' (only their alignment counts)."""
    *tensors, case = arrays
    operands = [geometry.Operand(t.data_ptr(), tuple(t.shape), tuple(t.stride())) for t in tensors]
    table = tensors[0].data_ptr()
    return geometry.launch_templates(
        operands,
        layout=case.layout,
        itemsize=tensors[0].element_size(),
        rotary_dim=case.rotary_dim,
        interleaved=case.interleaved,
        inverse=False,
        inplace=False,
        positions=None,
        position_itemsize=0,
        cos_ptr=table,
        sin_ptr=table,
        table_rows=case.seq,
    )


def _launches(count: int, case_name: str, dtype_key: str) -> None:
    import anyrope

    torch = bench_gpu._require_gpu()
    case = {case.name: case for case in bench_gpu.CASES}[case_name]
    dtype = getattr(torch, bench_gpu.DTYPES[dtype_key])
    q_shape, k_shape = bench_gpu._shapes(case)
    q = torch.randn(q_shape, device="cuda").to(dtype)
    k = torch.randn(k_shape, device="cuda").to(dtype)
    rope = bench_gpu.make_rope(anyrope, case)
    for _ in range(count):
        rope(q, k, None, layout=case.layout, impl="cuda")
    torch.cuda.synchronize()


def edited(source: str, edits: tuple[tuple[str, str], ...]) -> str:
    """``source`` with each (text, replacement) of ``edits`` made (a configuration's)."""
    for text, replacement in edits:
        if text not in source:
            raise RuntimeError(f"the kernel source no longer holds {text!r}")
        source = source.replace(text, replacement)
    return source


def _tokens_first(geometry: Any, tokens: int) -> Any:
    """``geometry._block`` with ``tokens`` tokens per block first, then the heads that fit."""

    def block(units: int, heads: int, seq: int, per_thread: int) -> tuple[int, int, int]:
        x = max(1, min(units, geometry.BLOCK))
        z = max(1, min(seq, tokens, geometry.BLOCK // x))
        slots = math.ceil(heads / per_thread)
        groups = math.ceil(slots / max(1, geometry.BLOCK // (x * z)))
        return x, math.ceil(slots / groups), z

    return block


def _run_config(index: int) -> None:
    """In a fresh process (no compiled kernel, no planned launch yet): one configuration."""
    torch = bench_gpu._require_gpu()
    timer = bench_gpu._timer(torch)
    from anyrope._paths.cuda import _module, geometry

    config = CONFIGS[index]
    if config.heads is not None:
        geometry.HEADS_PER_THREAD = dict.fromkeys(geometry.HEADS_PER_THREAD, config.heads)
        geometry.INTERLEAVED_HEADS_PER_THREAD = geometry.HEADS_PER_THREAD
        _module.COMPILE_OPTIONS = (
            *(o for o in _module.COMPILE_OPTIONS if "HEADS_PER_THREAD" not in o),
            *(
                f"-DANYROPE_{kind}HEADS_PER_THREAD_{size}={config.heads}"
                for kind in ("", "INTERLEAVED_")
                for size in (2, 4, 8)
            ),
        )
    source = edited(_module.kernel_source(), config.edits)
    _module.kernel_source = lambda: source  # type: ignore[assignment]
    if config.block is not None:
        geometry.BLOCK = config.block
    if config.tokens is not None:
        geometry._block = _tokens_first(geometry, config.tokens)  # type: ignore[attr-defined]
    cases = {case.name: case for case in bench_gpu.CASES}
    for dtype_key, case_name in DTYPE_CASES:
        row = {
            "config": config.name,
            **_measure(torch, timer, dtype_key, cases[case_name]),
        }
        print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run every configuration (exit status 1 if one failed), or one (``--config``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--config", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--launches", type=int, help="only run one case's kernel N times")
    parser.add_argument(
        "--case",
        choices=[case.name for case in bench_gpu.CASES],
        default=bench_gpu.CASES[0].name,
        help="the case --launches runs",
    )
    parser.add_argument(
        "--dtype", choices=sorted(bench_gpu.DTYPES), default="bf16", help="its dtype"
    )
    args = parser.parse_args(argv)
    if args.launches is not None:
        _launches(args.launches, args.case, args.dtype)
        return 0
    if args.config is not None:
        _run_config(args.config)
        return 0
    torch = bench_gpu._require_gpu()
    rows, failed = [], []
    for index in range(len(CONFIGS)):
        done = subprocess.run(
            [sys.executable, __file__, "--config", str(index)],
            capture_output=True,
            text=True,
            check=False,
        )
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            failed.append(CONFIGS[index].name)
            print(f"{CONFIGS[index].name}: failed\n{done.stderr[-2000:]}", flush=True)
        rows += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu-launch.json").write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2) + "\n"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
