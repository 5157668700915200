"""Two source trees of anyrope timed against each other, interleaved in one run (CPU).

    python benchmarks/bench_before_after.py --before ../old/src [--after src] \
        [--rounds 15] [--cases decode-1:numpy,prefill-1x1024:torch,...] \
        [--clock wall|cpu] [--processes 3] [--cpu N] [--json PATH]

Worker processes for each tree (each imports its own ``anyrope``, by ``PYTHONPATH``), all
alive for the whole run and all on one CPU (``--cpu``, by default the last one this process
may use): they never run at once, and a worker left alone on a busier core would be measured
slower for it. Each round asks one worker of each tree for one sample of every case, in
turn, each pair's first worker alternating from one of its rounds to the next, so that both
trees see the same load on a shared machine. The same code runs a few percent faster or
slower in one process than in another (where its arrays land in memory, it seems): one
worker per tree, the same tree against itself gave ratios from 0.95 to 1.08 on the large
cases. So each tree has ``--processes`` workers, round ``r`` asks the pair ``r mod
processes``, and a ratio is not the luck of one process. A sample is ``n`` back-to-back
calls, ``n`` fixed per case for both trees (about 20 ms of work). The table gives, in
microseconds per call, the best sample of each tree (noise on a shared machine only adds
time) and the median one, and the ratios after / before of the best samples and the median
of the per-round ratios (below 1.00: the after tree is faster). Only the public API is
called, the same code on both sides. ``--clock cpu`` times the CPU time of the workers'
threads instead of the wall clock: on a machine shared with other work, the time they wait
for the CPU is left out.

Cases, float32 with ``RoPE(128)``; q (B, S, 32, 128), k (B, S, 8, 128), layout bshd:

* ``decode-1`` / ``decode-32``: (1, 1) and (32, 1) at ``positions=1000`` (an int offset);
* ``decode-1-ids``: (1, 1) with ``position_ids`` of shape (1, 1);
* ``small-1x128``, ``prefill-1x1024``: positions ``None``;
* ``rotate_qk``: the functional API, decode-1;
* ``tables-4096``: a new ``RoPE(128)`` (a new base each call) and its tables of 4096
  positions;

each for NumPy arrays and torch CPU tensors (``torch.set_num_threads(1)``), but
``tables-4096`` (NumPy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {
    "decode-1": (1, 1, 1000),
    "decode-32": (32, 1, 1000),
    "decode-1-ids": (1, 1, "ids"),
    "small-1x128": (1, 128, None),
    "prefill-1x1024": (1, 1024, None),
    "rotate_qk": (1, 1, 1000),
}
CASES = [f"{name} {lib}" for name in SHAPES for lib in ("numpy", "torch")] + ["tables-4096 numpy"]


def _worker(clock: str) -> None:
    """Answer "case n" lines on stdin with the seconds of n calls on ``clock``."""
    import numpy as np
    import torch

    import anyrope

    torch.set_num_threads(1)
    rope = anyrope.RoPE(128)
    rng = np.random.default_rng(0)
    calls = {}
    for name, (batch, seq, positions) in SHAPES.items():
        q = rng.standard_normal((batch, seq, 32, 128)).astype(np.float32)
        k = rng.standard_normal((batch, seq, 8, 128)).astype(np.float32)
        ids = np.full((batch, seq), 1000)
        for lib, arrays in (("numpy", (q, k, ids)), ("torch", map(torch.from_numpy, (q, k, ids)))):
            q_, k_, ids_ = arrays
            where = ids_ if positions == "ids" else positions
            if name == "rotate_qk":
                calls[f"{name} {lib}"] = lambda q=q_, k=k_, p=where: anyrope.rotate_qk(q, k, p)
            else:
                calls[f"{name} {lib}"] = lambda q=q_, k=k_, p=where: rope(q, k, p)
    bases = iter(range(10**9))
    calls["tables-4096 numpy"] = lambda: anyrope.RoPE(128, base=10000.0 + next(bases)).tables(
        np.arange(4096), dtype=np.float32
    )
    now = {"wall": time.perf_counter, "cpu": time.process_time}[clock]
    for line in sys.stdin:
        case, n = line.rsplit(" ", 1)
        call = calls[case]
        start = now()
        for _ in range(int(n)):
            call()
        print(now() - start, flush=True)


def _start(src: Path, clock: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", clock],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _sample(worker: subprocess.Popen[str], case: str, n: int) -> float:
    assert worker.stdin is not None
    assert worker.stdout is not None
    worker.stdin.write(f"{case} {n}\n")
    worker.stdin.flush()
    return float(worker.stdout.readline()) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the src folder before")
    parser.add_argument("--after", type=Path, default=Path("src"), help="the src folder after")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cases", default=",".join(c.replace(" ", ":") for c in CASES))
    parser.add_argument("--json", type=Path, help="where to write the samples")
    parser.add_argument("--cpu", type=int, help="the CPU all workers run on")
    parser.add_argument("--processes", type=int, default=3, help="workers per tree")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time.perf_counter, or the CPU time of the worker's threads (time.process_time: "
        "the time other processes take the CPU is not counted)",
    )
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):  # Linux; the workers inherit it
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0)) if args.cpu is None else args.cpu})
    cases = [c.replace(":", " ") for c in args.cases.split(",")]
    workers = {
        side: [_start(src, args.clock) for _ in range(args.processes)]
        for side, src in (("before", args.before), ("after", args.after))
    }
    # Warm all, and fix n per case from the before tree: about 20 ms a sample.
    counts = {}
    for case in cases:
        for worker in (*workers["before"], *workers["after"]):
            _sample(worker, case, 3)
        counts[case] = max(1, int(20_000 / _sample(workers["before"][0], case, 5)))
    samples: dict[str, dict[str, list[float]]] = {c: {"before": [], "after": []} for c in cases}
    for r in range(args.rounds):
        # Each pair goes first in every other of its rounds, whatever the count of pairs.
        order = ("before", "after") if r // args.processes % 2 == 0 else ("after", "before")
        for case in cases:
            for side in order:
                worker = workers[side][r % args.processes]
                samples[case][side].append(_sample(worker, case, counts[case]))
    for worker in (*workers["before"], *workers["after"]):
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    print(f"{'':<20} {'best us':>17} {'median us':>17} {'after/before':>15}")
    heads = ("before", "after") * 2
    print(f"{'case':<20} {' '.join(f'{h:>8}' for h in heads)} {'best':>7} {'median':>7}")
    for case in cases:
        before, after = samples[case]["before"], samples[case]["after"]
        ratio = statistics.median(a / b for a, b in zip(after, before, strict=True))
        print(
            f"{case:<20} {min(before):>8.1f} {min(after):>8.1f} {statistics.median(before):>8.1f} "
            f"{statistics.median(after):>8.1f} {min(after) / min(before):>7.2f} {ratio:>7.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "samples": samples}, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2])
    else:
        main()
