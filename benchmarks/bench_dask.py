"""Throughput of anyrope.rotate on a dask LocalCluster against NumPy in one process.

    python benchmarks/bench_dask.py [--repeats 5] [--json benchmarks/results/dask.json]

x of shape (8, 4096, 16, 128) float32 (256 MiB), the same data on every path, in one
run, each call at a new position offset (see ``median_ms_new_offsets``):

* ``numpy``: ``anyrope.rotate(x, offset)`` on the NumPy array, in this process;
* ``dask, data on the workers``: x split into chunks (1, 1024, 16, 128) and persisted
  on a ``distributed.LocalCluster`` (2 worker processes, 1 thread each) before timing;
  the time covers ``rotate`` and computing every block, the results staying on the
  workers (the cluster's own throughput);
* ``dask, from and to this process``: the same, but starting from the NumPy array here
  and gathering the result back (adds pickling and moving the data both ways).

GB/s counts the bytes read and written, ``2 * x.nbytes``, as ``bench_cpu.py`` does.
Prints medians and GB/s, writes JSON.
"""

from __future__ import annotations

import argparse
import itertools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import distributed
import numpy as np

import anyrope
from anyrope.tools._benchmark import median_ms, write_json

SHAPE = (8, 4096, 16, 128)
CHUNKS = (1, 1024, 16, 128)
WORKERS = 2


def median_ms_new_offsets(fn: Callable[[int], Any], repeats: int) -> float:
    """:func:`median_ms` of ``fn(offset)`` with a new position offset on every call.

    dask names tasks after their inputs, so a call with the previous call's offset could
    be answered from results the cluster still holds; a new offset makes every call compute.
    """
    offsets = itertools.count()
    return median_ms(lambda: fn(next(offsets)), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per path (median)")
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("benchmarks/results/dask.json"),
        help="where to write JSON",
    )
    args = parser.parse_args()
    # The last path sends the NumPy array inside the graph on purpose: that is what it measures.
    warnings.filterwarnings("ignore", message="Sending large graph")

    x = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    expected = anyrope.rotate(x)
    timings = {
        "numpy": median_ms_new_offsets(lambda offset: anyrope.rotate(x, offset), args.repeats)
    }

    with (
        distributed.LocalCluster(
            n_workers=WORKERS, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        on_workers = client.persist(da.from_array(x, chunks=CHUNKS))
        distributed.wait(on_workers)

        def rotate_on_workers(offset: int) -> None:
            distributed.wait(client.persist(anyrope.rotate(on_workers, offset)))

        def rotate_from_here(offset: int) -> np.ndarray:
            return anyrope.rotate(da.from_array(x, chunks=CHUNKS), offset).compute()

        # Same bits as NumPy, checked before timing so that a wrong path is never reported.
        assert np.array_equal(anyrope.rotate(on_workers).compute(), expected)
        assert np.array_equal(rotate_from_here(0), expected)
        timings["dask, data on the workers"] = median_ms_new_offsets(
            rotate_on_workers, args.repeats
        )
        timings["dask, from and to this process"] = median_ms_new_offsets(
            rotate_from_here, args.repeats
        )

    moved = 2 * x.nbytes
    rows = {
        name: {"median_ms": ms, "gbytes_per_s": moved / ms / 1e6} for name, ms in timings.items()
    }
    print(f"{'path':<32} {'median ms':>10} {'GB/s':>7}")
    for name, row in rows.items():
        print(f"{name:<32} {row['median_ms']:>10.1f} {row['gbytes_per_s']:>7.2f}")

    write_json(
        args.json,
        {
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "shape": list(SHAPE),
            "chunks": list(CHUNKS),
            "workers": WORKERS,
            "repeats": args.repeats,
            "paths": rows,
        },
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
