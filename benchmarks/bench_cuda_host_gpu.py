"""Host time per call of the CUDA path on a GPU, for one source tree or two against each other.

    python benchmarks/bench_cuda_host_gpu.py [--before OLD/src] [--after src] [--rounds 7]
        [--calls 300] [--clock wall|cpu] [--wheels .whl] [--json PATH] [--stub]

A decode step: q (64, 1, 32, 128) and k (64, 1, 8, 128), layout ``bshd``, bfloat16 for
torch and float16 for CuPy (which has no bfloat16), on CUDA device 0. Lines:

* ``torch offset``: ``rope(q, k, positions=1000, impl="cuda")``, ``rope = RoPE(128)``;
* ``torch tensor, max_positions``: ``RoPE(128, max_positions=4096)`` with a device
  positions tensor of shape (64, 1) (never read on the host);
* ``cupy offset``: the first line with CuPy arrays (left out without CuPy);
* ``torch q.add_(1)``: one bare torch operation on q's shape, for scale.

A sample is ``--calls`` back-to-back calls, timed without a synchronisation inside (the
device is synchronised after each sample, outside the time); the table gives the median
over ``--rounds`` rounds, in microseconds per call. Each tree runs in a worker process
of its own (``PYTHONPATH`` = the tree, then the wheels unpacked by ``gpu_proof.py``
from ``--wheels``), both alive for the whole run; each round asks both for one sample
of every line, the first of the pair alternating, so that both see the same machine.
With ``--before``, the last column is the ratio after / before of the medians (below
1.00: the after tree is faster). About 15 s on an H100 host, more where the kernels are
compiled for the first time.

Without a GPU it says so in one line and exits 2. ``--stub`` runs, on any machine, the
host side with torch CPU tensors standing in for CUDA ones and the driver call stubbed
(``bench_cuda_host.cpu_tensors_as_cuda``): the lines then are ``torch offset``, ``torch
tensor, max_positions``, ``launch planning``, ``outputs and launch`` (what no launch from
Python skips) and ``torch q.add_(1)`` (q of one element) on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_proof  # noqa: E402  (the benchmarks folder, put on the path above)

BATCH, Q_HEADS, KV_HEADS, HEAD_DIM, POSITION, TABLE_LEN = 64, 32, 8, 128, 1000, 4096


def gpu_lines() -> dict[str, Callable[[], object]]:
    import torch

    import anyrope

    rope = anyrope.RoPE(HEAD_DIM)
    ahead = anyrope.RoPE(HEAD_DIM, max_positions=TABLE_LEN)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(BATCH, 1, Q_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16).cuda()
    k = torch.randn(BATCH, 1, KV_HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16).cuda()
    p = torch.full((BATCH, 1), POSITION, dtype=torch.int64, device="cuda")
    bare = torch.zeros_like(q)
    lines: dict[str, Callable[[], object]] = {
        "torch offset": lambda: rope(q, k, positions=POSITION, impl="cuda"),
        "torch tensor, max_positions": lambda: ahead(q, k, positions=p, impl="cuda"),
    }
    try:
        import cupy
    except ImportError:
        pass
    else:
        qc, kc = cupy.asarray(q.half()), cupy.asarray(k.half())
        lines["cupy offset"] = lambda: rope(qc, kc, positions=POSITION, impl="cuda")
    lines["torch q.add_(1)"] = lambda: bare.add_(1)
    return lines


def stub_lines(stack: ExitStack) -> dict[str, Callable[[], object]]:
    import torch

    import bench_cuda_host

    torch.set_num_threads(1)
    stack.enter_context(bench_cuda_host.cpu_tensors_as_cuda())
    cases = bench_cuda_host.cases(torch)
    bare = torch.zeros(1, dtype=torch.bfloat16)  # the host work of one operation
    return {
        "torch offset": cases["anyrope offset"],
        "torch tensor, max_positions": cases["anyrope tensor, max_positions"],
        "launch planning": cases["launch planning"],
        "outputs and launch": cases["outputs and launch"],
        "torch q.add_(1)": lambda: bare.add_(1),
    }


def worker(stub: bool, clock_name: str) -> None:
    """Answer ``name calls`` lines on stdin with the microseconds per call of one sample."""
    clock = time.perf_counter_ns if clock_name == "wall" else time.thread_time_ns
    with ExitStack() as stack:
        lines = stub_lines(stack) if stub else gpu_lines()
        sync: Callable[[], None] = lambda: None  # noqa: E731
        if not stub:
            import torch

            sync = torch.cuda.synchronize
        for fn in lines.values():  # warm up: kernels compiled, plans and tables made
            for _ in range(20):
                fn()
        sync()
        print(json.dumps(list(lines)), flush=True)
        for request in sys.stdin:
            name, calls = request.rsplit(" ", 1)
            fn, n = lines[name], int(calls)
            start = clock()
            for _ in range(n):
                fn()
            elapsed = clock() - start
            sync()
            print(elapsed / n / 1e3, flush=True)


def _workers(trees: list[Path], args: argparse.Namespace) -> Iterator[subprocess.Popen[str]]:
    site = gpu_proof.unpack_wheels(Path(args.wheels))
    for tree in trees:
        env = dict(os.environ)
        paths = [str(tree), *([str(site)] if site is not None else [])]
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
        command = [sys.executable, __file__, "--worker", "--clock", args.clock]
        yield subprocess.Popen(
            command + (["--stub"] if args.stub else []),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )


def _ask(process: subprocess.Popen[str], request: str) -> str:
    assert process.stdin is not None
    assert process.stdout is not None
    if request:
        process.stdin.write(request + "\n")
        process.stdin.flush()
    answer = process.stdout.readline()
    if not answer:
        sys.exit(f"bench_cuda_host_gpu: a worker ended early (exit code {process.wait()})")
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None, help="another tree's src folder")
    parser.add_argument("--after", type=Path, default=HERE.parent / "src")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--wheels", default=str(HERE.parent / ".whl"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--stub", action="store_true", help="CPU tensors, driver call stubbed")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.stub, args.clock)
        return 0
    if not args.stub:
        absent = gpu_proof.gpu_absent()
        if absent is not None:
            print(f"bench_cuda_host_gpu: no CUDA GPU ({absent}); --stub runs on a CPU")
            return gpu_proof.EXIT_NO_GPU
    trees = {"after": args.after.resolve()}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    processes = dict(zip(trees, _workers(list(trees.values()), args), strict=True))
    try:
        names, *_ = [json.loads(_ask(p, "")) for p in processes.values()]
        samples = {(tree, name): [] for tree in trees for name in names}
        for round_ in range(args.rounds):
            order = list(trees)[:: 1 if round_ % 2 == 0 else -1]
            for name in names:
                for tree in order:
                    us = float(_ask(processes[tree], f"{name} {args.calls}"))
                    samples[tree, name].append(us)
    finally:
        for process in processes.values():
            assert process.stdin is not None
            process.stdin.close()
            process.wait()
    medians = {key: statistics.median(values) for key, values in samples.items()}
    header = "".join(f"{tree + ' us':>12}" for tree in trees)
    print(f"q ({BATCH}, 1, {Q_HEADS}, {HEAD_DIM}) + k ({BATCH}, 1, {KV_HEADS}, {HEAD_DIM})")
    print(f"{'line':<30}{header}{'  after/before' if len(trees) == 2 else ''}")
    for name in names:
        row = "".join(f"{medians[tree, name]:>12.1f}" for tree in trees)
        if len(trees) == 2:
            row += f"{medians['after', name] / medians['before', name]:>14.2f}"
        print(f"{name:<30}{row}")
    if args.json is not None:
        report = {
            "trees": {tree: str(path) for tree, path in trees.items()},
            "rounds": args.rounds,
            "calls": args.calls,
            "clock": args.clock,
            "median_us": {f"{tree}: {name}": us for (tree, name), us in medians.items()},
        }
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
