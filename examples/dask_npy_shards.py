"""RoPE over a dataset of embeddings stored as ``.npy`` shards, with dask.

A pipeline without torch often keeps its embeddings on disk as one ``.npy`` file per
shard. This script writes a few small shards of (documents, tokens, heads, head_dim)
float32 to a temporary directory, opens them lazily (``np.load(mmap_mode="r")`` and
``da.from_array``: nothing is read yet), joins them along the document axis, rotates
the whole dataset with ``anyrope.rotate`` (lazy too, chunked like the input), and writes
the result back as one ``.npy`` shard per input shard with ``da.store``. Dask reads,
rotates and writes block by block, so the dataset never needs to fit in memory.

It then checks one output shard bit for bit against ``anyrope.rotate`` on the NumPy
array of that shard.

Run: ``python examples/dask_npy_shards.py`` (needs dask; skips without it).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np

import anyrope

SHARDS = 4
SHARD_SHAPE = (3, 256, 4, 64)  # (documents, tokens, heads, head_dim)
CHUNKS = (1, 128, 4, 64)  # two blocks along the tokens: each gets its own positions
OFFSET = 1000  # the first token's position, as after a prompt of 1000 tokens


def write_shards(directory: Path) -> list[Path]:
    """Write the input dataset, one ``.npy`` file per shard."""
    rng = np.random.default_rng(0)
    paths = []
    for index in range(SHARDS):
        path = directory / f"embeddings-{index:03d}.npy"
        np.save(path, rng.standard_normal(SHARD_SHAPE, dtype=np.float32))
        paths.append(path)
    return paths


def main() -> int:
    if importlib.util.find_spec("dask") is None:
        print("skipped: dask is not installed")
        return 0
    import dask.array as da

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        inputs = write_shards(directory)

        shards = [da.from_array(np.load(p, mmap_mode="r"), chunks=CHUNKS) for p in inputs]
        dataset = da.concatenate(shards, axis=0)
        rotated = anyrope.rotate(dataset, OFFSET)
        assert rotated.chunks == dataset.chunks

        # One open-for-writing memory map per output shard; da.store fills each region
        # from the blocks that cover it, computing them as it goes.
        outputs = [directory / f"rotated-{index:03d}.npy" for index in range(SHARDS)]
        targets = [
            np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=SHARD_SHAPE)
            for p in outputs
        ]
        documents = SHARD_SHAPE[0]
        da.store([rotated[i * documents : (i + 1) * documents] for i in range(SHARDS)], targets)
        for target in targets:
            target.flush()
        del targets  # close the memory maps before the directory is removed

        checked = 2
        expected = anyrope.rotate(np.load(inputs[checked]), OFFSET)
        assert np.array_equal(np.load(outputs[checked]), expected), "dask differs from NumPy"

    print(
        f"dask: rotated {SHARDS} .npy shards of {SHARD_SHAPE} lazily in blocks of {CHUNKS}, "
        f"stored with da.store; shard {checked} identical to NumPy bit for bit"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
