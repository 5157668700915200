"""CPU benchmark: anyrope next to a copy and its peers, every case round-robin.

    python benchmarks/bench_cpu.py [--repeats 15] [--cases prefill-1x4096,...] \
        [--dtypes float32,...] [--json benchmarks/results/cpu.json]

The measurement of ``python -m anyrope bench`` (:mod:`anyrope.tools._benchmark`): q (B, S, 32,
128) and k (B, S, 8, 128) for prefill (1, 4096) and (4, 1024), small (1, 128) and decode
(1, 1) and (32, 1), in float32, float16, bfloat16 and float64; a copy into fresh arrays,
the naive expression in NumPy, eager PyTorch, torch.compile and jax.jit, and anyrope on
NumPy and PyTorch, interleaved round-robin within each round. Prints each case's table
and, per case, anyrope's time over the copy's and over the fastest peer's; writes JSON.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from anyrope.tools._benchmark import CASES, DTYPES, format_case, measure_case, write_json

PEERS = ("numpy naive", "torch eager", "torch.compile", "jax.jit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds (median)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes")
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/results/cpu.json"), help="where to write JSON"
    )
    args = parser.parse_args()
    results = []
    summary = []
    for case in args.cases.split(","):
        for dtype in args.dtypes.split(","):
            result = measure_case(case, dtype, args.repeats)
            print(format_case(result), flush=True)
            results.append(result)
            by_name = {t.name: t for t in result.timings}
            peers = [by_name[name] for name in PEERS if name in by_name]
            fastest = min(peers, key=lambda t: t.median_ms)
            for mine in ("anyrope numpy", "anyrope torch"):
                if mine in by_name:
                    t = by_name[mine]
                    summary.append(
                        f"{case:<15} {dtype:<9} {mine:<14} {t.x_copy:>6.2f}x copy  "
                        f"{t.median_ms / fastest.median_ms:>5.2f}x {fastest.name}"
                    )
    print("\nanyrope's time over the copy's and over the fastest peer's (< 1: faster)")
    print("\n".join(summary))
    write_json(args.json, {"rounds": args.repeats, "results": [asdict(r) for r in results]})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
