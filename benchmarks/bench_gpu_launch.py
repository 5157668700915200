"""The kernel's launch shape against a device copy: registers and block size, swept.

    python benchmarks/bench_gpu_launch.py [--out benchmarks/results]
    ncu --clock-control none --kernel-name regex:anyrope --launch-skip 4 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/bench_gpu_launch.py --launches 5

The prefill cases of ``bench_gpu.py`` (bfloat16 bshd, bhsd, rotary 64 of 128 and
interleaved; float32 bshd) under each launch configuration of :data:`CONFIGS`: the
least blocks of 256 threads that the kernel's ``__launch_bounds__`` asks to fit on a
multiprocessor (which caps its registers), weak loads of x and the positions instead of
strong ones, and the most threads per block (``geometry.BLOCK``, with the launch bounds
that allow it). For each: the
registers per thread of the variant that ran, the blocks that fit per SM
(``cuOccupancyMaxActiveBlocksPerMultiprocessor``), the device time (median, L2
flushed) and the fraction of a device copy of the same bytes timed in the same run.
The figures that docs/performance.rst's launch model is checked against. Writes
``gpu-launch.json`` under ``--out``. ``--launches N`` only runs the bfloat16 prefill
kernel N times, for a profiler (the ``ncu`` command above). Needs a CUDA GPU, PyTorch,
CuPy and Triton.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gpu

_BOUNDS = "__launch_bounds__(256)"
_STRONG = "ld.relaxed.gpu.global"
#: (name, extra NVRTC options, (text, replacement) edits of the kernel source, threads
#: per block at most).
CONFIGS: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], int | None], ...] = (
    ("as shipped", (), (), None),
    ("launch bounds 256 x 6", (), ((_BOUNDS, "__launch_bounds__(256, 6)"),), None),
    ("launch bounds 256 x 8", (), ((_BOUNDS, "__launch_bounds__(256, 8)"),), None),
    ("weak loads of x and positions", (), ((_STRONG, "ld.global"),), None),
    (
        "weak loads, launch bounds 256 x 8",
        (),
        ((_STRONG, "ld.global"), (_BOUNDS, "__launch_bounds__(256, 8)")),
        None,
    ),
    ("blocks of up to 512 threads", (), ((_BOUNDS, "__launch_bounds__(512)"),), 512),
    ("blocks of up to 128 threads", (), (), 128),
)
DTYPE_CASES = (
    ("bf16", "prefill"),
    ("bf16", "prefill bhsd"),
    ("bf16", "prefill rotary 64"),
    ("bf16", "prefill interleaved"),
    ("fp32", "prefill"),
)


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
    copy_us = timer(lambda: (q_copy.copy_(q), k_copy.copy_(k)))
    kernel_us = timer(lambda: rope(q, k, None, layout=case.layout, impl="cuda"))
    width = 16 // q.element_size()
    kernel = _module.get_kernel(
        torch.cuda.current_device(),
        bench_gpu.DTYPES[dtype_key],
        width=width,
        interleaved=case.interleaved,
        wide_index=False,
    )
    block = geometry._block(case.rotary_dim // 2 // width, case.q_heads + case.k_heads, case.seq)
    threads = block[0] * block[1] * block[2]
    try:
        blocks_per_sm: int | str = int(
            cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                kernel.kernel.ptr, threads, 0
            )
        )
    except Exception as error:  # a figure missing, never the run
        blocks_per_sm = f"unknown ({type(error).__name__}: {error})"
    return {
        "dtype": dtype_key,
        "case": case.name,
        "registers": int(kernel.num_regs),
        "block": block,
        "blocks per SM": blocks_per_sm,
        "copy us": copy_us,
        "kernel us": kernel_us,
        "fraction of copy": copy_us / kernel_us,
    }


def _launches(count: int) -> None:
    import anyrope

    torch = bench_gpu._require_gpu()
    case = bench_gpu.CASES[0]
    q_shape, k_shape = bench_gpu._shapes(case)
    q = torch.randn(q_shape, device="cuda").to(torch.bfloat16)
    k = torch.randn(k_shape, device="cuda").to(torch.bfloat16)
    rope = bench_gpu.make_rope(anyrope, case)
    for _ in range(count):
        rope(q, k, None, layout=case.layout, impl="cuda")
    torch.cuda.synchronize()


def _run_config(index: int) -> None:
    """In a fresh process (no compiled kernel, no planned launch yet): one configuration."""
    torch = bench_gpu._require_gpu()
    timer = bench_gpu._timer(torch)
    from anyrope._paths.cuda import _module, geometry

    name, options, edits, block = CONFIGS[index]
    _module.COMPILE_OPTIONS = (*_module.COMPILE_OPTIONS, *options)
    source = _module.kernel_source()
    for text, replacement in edits:
        if text not in source:
            raise RuntimeError(f"the kernel source no longer holds {text!r}")
        source = source.replace(text, replacement)
    _module.kernel_source = lambda: source  # type: ignore[assignment]
    if block is not None:
        geometry.BLOCK = block
    cases = {case.name: case for case in bench_gpu.CASES}
    for dtype_key, case_name in DTYPE_CASES:
        row = {"config": name, **_measure(torch, timer, dtype_key, cases[case_name])}
        print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--config", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--launches", type=int, help="only run the bf16 prefill kernel")
    args = parser.parse_args(argv)
    if args.launches is not None:
        _launches(args.launches)
        return
    if args.config is not None:
        _run_config(args.config)
        return
    torch = bench_gpu._require_gpu()
    rows = []
    for index in range(len(CONFIGS)):
        done = subprocess.run(
            [sys.executable, __file__, "--config", str(index)],
            capture_output=True,
            text=True,
            check=False,
        )
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            print(f"{CONFIGS[index][0]}: failed\n{done.stderr[-2000:]}", flush=True)
        rows += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu-launch.json").write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
