"""CPU benchmark of anyrope against a copy and the naive NumPy / PyTorch expressions.

    python benchmarks/bench_cpu.py [--repeats 15] [--json benchmarks/results/cpu.json]

q (1, 2048, 32, 128) + k (1, 2048, 8, 128) float32, all paths measured in one run;
prints medians, GB/s and each path's speed as a fraction of the copy's, writes JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from anyrope._benchmark import format_timings, run_cpu_benchmark, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per path (median)")
    parser.add_argument(
        "--json", type=Path, default=Path("benchmarks/results/cpu.json"), help="where to write JSON"
    )
    args = parser.parse_args()
    timings = run_cpu_benchmark(args.repeats)
    print(format_timings(timings))
    by_name = {t.name: t for t in timings}
    ratios = {
        "numpy speedup over naive": by_name["numpy naive expression"].median_ms
        / by_name["anyrope numpy"].median_ms
    }
    if "anyrope torch" in by_name:
        ratios["torch speedup over eager"] = (
            by_name["torch eager expression"].median_ms / by_name["anyrope torch"].median_ms
        )
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    write_json(args.json, {"timings": [t.as_dict() for t in timings], "ratios": ratios})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
