"""Decoding far from position 0: the table work of one token, NumPy float32, CPU.

    python benchmarks/bench_far_offsets.py [--steps 2000]

``RoPE(128)`` and one token, x of shape (1, 1, 1, 128) float32, ``rope.rotate(x, p)``:

* far single offset: ``p = 2**40 + k 2**32`` for k = 0 .. 7 (issue 23: 0.11, 0.22, 0.43
  ... 13.9 s a call), then ``p`` near ``2**52``. Each is a new position past 2**33
  radians: the call builds its own row, with the exact far reduction of the host math.
  The first call of a process computes pi to a few hundred bits once per magnitude.
* interleaved sequences: two sequences decoded in turn at ``3e6 + i`` and ``9e6 + i``
  (issue 23: 33 ms a call), against one sequence at ``3e6 + i`` alone, ``--steps``
  tokens each.

Besides the time (median microseconds per call, and the slowest call), each line counts
the rows of tables built, as :meth:`anyrope._tables.TableCache.build` sees them: the work
that the tests bound (``tests/test_rope.py``), the same on any machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator

import numpy as np

import anyrope
from anyrope import _tables

HEAD_DIM = 128


def _counting() -> list[int]:
    sizes: list[int] = []
    build = _tables.TableCache.build

    def counted(self, positions, *args):  # type: ignore[no-untyped-def]
        sizes.append(positions.size)
        return build(self, positions, *args)

    _tables.TableCache.build = counted  # type: ignore[method-assign]
    return sizes


def _run(name: str, positions: Iterator[int], sizes: list[int]) -> None:
    rope = anyrope.RoPE(HEAD_DIM)
    x = np.ones((1, 1, 1, HEAD_DIM), np.float32)
    times, rows = [], []
    for position in positions:
        before = sum(sizes)
        start = time.perf_counter()
        rope.rotate(x, position)
        times.append(time.perf_counter() - start)
        rows.append(sum(sizes) - before)
    print(
        f"{name:<34} {len(times):>6} {statistics.median(times) * 1e6:>10.1f} "
        f"{max(times) * 1e6:>10.1f} {sum(rows) / len(rows):>10.2f} {max(rows):>9}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="tokens a sequence decodes")
    args = parser.parse_args()
    anyrope.RoPE(HEAD_DIM).rotate(np.ones((1, 1, 1, HEAD_DIM), np.float32), 2**40)  # warm
    sizes = _counting()
    columns = ("calls", 6), ("median us", 10), ("max us", 10), ("rows/call", 10), ("max rows", 9)
    print(f"{'case':<34} " + " ".join(f"{name:>{width}}" for name, width in columns))
    _run("far: 2**40 + k 2**32, k < 8", iter([2**40 + k * 2**32 for k in range(8)]), sizes)
    _run("far: 2**52 + k 2**20, k < 8", iter([2**52 + k * 2**20 for k in range(8)]), sizes)
    steps = range(args.steps)
    _run("one sequence at 3e6", iter([3_000_000 + i for i in steps]), sizes)
    turns = [p for i in steps for p in (3_000_000 + i, 9_000_000 + i)]
    _run("two sequences in turn, 3e6 and 9e6", iter(turns), sizes)


if __name__ == "__main__":
    main()
