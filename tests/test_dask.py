"""dask.array: lazy, chunked like the input, the same bits as NumPy; and on a real cluster."""

from __future__ import annotations

import os

import numpy as np
import pytest

import anyrope
from anyrope.tools._backends import numpy_dtype

da = pytest.importorskip("dask.array", reason="dask is not installed")
dask = pytest.importorskip("dask")

PERMUTATION = {"bshd": (0, 1, 2, 3), "bhsd": (0, 2, 1, 3), "sbhd": (1, 0, 2, 3)}


class CountComputes(dask.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.count = 0

    def _start(self, dsk):
        self.count += 1


def _input(layout, dtype="float32", shape=(3, 37, 4, 16)):
    rng = np.random.default_rng(0)
    host = rng.standard_normal(shape).astype(numpy_dtype(dtype))
    return np.ascontiguousarray(host.transpose(PERMUTATION[layout]))


def _positions(kind):
    rng = np.random.default_rng(1)
    return {
        "none": None,
        "offset": 1000,
        "seq": rng.integers(0, 10**6, size=37),
        "batch-seq": rng.integers(0, 10**6, size=(3, 37)),
        "one-seq": rng.integers(0, 10**6, size=(1, 37)),
        "dask": da.from_array(rng.integers(0, 10**6, size=(3, 37)), chunks=(2, 10)),
    }[kind]


@pytest.mark.parametrize("kind", ["none", "offset", "seq", "batch-seq", "one-seq", "dask"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
def test_lazy_chunked_like_input_and_numpy_bits(layout, kind):
    host = _input(layout)
    chunks = {"bshd": (2, 10, 3, 16), "bhsd": (2, 3, 10, 16), "sbhd": (10, 2, 3, 16)}[layout]
    x = da.from_array(host, chunks=chunks)
    positions = _positions(kind)
    with CountComputes() as counter:
        y = anyrope.rotate(x, positions, layout=layout)
    assert counter.count == 0, "rotate computed something before being asked"
    assert isinstance(y, da.Array)
    assert y.chunks == x.chunks
    host_positions = positions.compute() if isinstance(positions, da.Array) else positions
    expected = anyrope.rotate(host, host_positions, layout=layout)
    np.testing.assert_array_equal(y.compute(), expected)


@pytest.mark.parametrize("kind", ["seq", "dask-seq", "offset"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sbhd"])
def test_inputs_without_batch_axes(layout, kind):
    """``(heads, seq, head_dim)`` and its kin: a "bhsd" input with a positions array
    failed inside the path (its table had no heads axis)."""
    host = _input(layout)[0] if layout != "sbhd" else _input(layout)[:, 0]
    x = da.from_array(host, chunks=(2, 10, 16) if layout == "bhsd" else (10, 2, 16))
    seq = np.random.default_rng(2).integers(0, 10**6, size=37)
    positions = {"seq": seq, "dask-seq": da.from_array(seq, chunks=10), "offset": 7}[kind]
    expected = anyrope.rotate(host, seq if kind != "offset" else 7, layout=layout)
    np.testing.assert_array_equal(anyrope.rotate(x, positions, layout=layout).compute(), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dtypes_and_split_head_dim(dtype):
    host = _input("bshd", dtype, shape=(2, 20, 3, 32))
    x = da.from_array(host, chunks=(1, 7, 2, 8))
    rope = anyrope.RoPE(32, rotary_dim=24, interleaved=True)
    y = rope.rotate(x, 5, inverse=True)
    assert y.chunks == x.chunks
    assert y.dtype == x.dtype
    expected = rope.rotate(host, 5, inverse=True)
    np.testing.assert_array_equal(y.compute().view(np.uint8), expected.view(np.uint8))


def test_q_and_k_with_different_chunks():
    q_host = _input("bshd", shape=(2, 30, 8, 16))
    k_host = _input("bshd", shape=(2, 30, 2, 16))
    q = da.from_array(q_host, chunks=(1, 8, 4, 16))
    k = da.from_array(k_host, chunks=(2, 16, 1, 16))
    positions = np.arange(30)[::-1].copy()
    q2, k2 = anyrope.rotate_qk(q, k, positions, base=5e5)
    q_ref, k_ref = anyrope.rotate_qk(q_host, k_host, positions, base=5e5)
    assert (q2.chunks, k2.chunks) == (q.chunks, k.chunks)
    np.testing.assert_array_equal(q2.compute(), q_ref)
    np.testing.assert_array_equal(k2.compute(), k_ref)


def test_errors():
    x = da.zeros((1, 4, 2, 8), chunks=2)
    with pytest.raises(ValueError, match="dask arrays, which are immutable"):
        anyrope.rotate(x, inplace=True)
    with pytest.raises(ValueError, match="does not broadcast"):
        anyrope.rotate(x, np.arange(5))
    with pytest.raises(TypeError, match="integer dtype"):
        anyrope.rotate(x, np.arange(4.0))
    with pytest.raises(TypeError, match="integer array; got list"):
        anyrope.rotate(x, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="non-negative"):
        anyrope.rotate(x, -1)
    dynamic = anyrope.RoPE(
        8, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16
    )
    with pytest.raises(ValueError, match="fixed frequencies"):
        dynamic.rotate(x)


def test_concrete_positions_are_checked_at_the_call():
    x = da.zeros((1, 4, 2, 8), chunks=2)
    with pytest.raises(ValueError, match="non-negative"):
        anyrope.rotate(x, np.array([0, 1, -2, 3]))
    with pytest.raises(ValueError, match="below 2\\*\\*53"):
        anyrope.rotate(x, np.array([0, 1, 2**53, 3], dtype=np.uint64))


def test_lazy_positions_fail_when_computed():
    y = anyrope.rotate(da.zeros((1, 4, 2, 8), chunks=2), da.from_array(np.array([0, 1, -2, 3])))
    with pytest.raises(ValueError, match="non-negative"):
        y.compute()


@pytest.fixture
def environment_restored():
    """distributed's LocalCluster sets OMP_NUM_THREADS=1 (and more) in this process's
    environment for its workers and leaves it there; later subprocesses of the session
    would inherit one thread."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.usefixtures("environment_restored")
def test_local_cluster_input_larger_than_a_worker_memory_limit():
    """Two worker processes of 320 MiB each rotate a 400 MiB array made on the workers.

    A worker that held the whole input would pass its limit and be killed; each block
    is checked bit for bit against NumPy on that block, so only booleans come back.
    """
    distributed = pytest.importorskip("distributed", reason="distributed is not installed")
    # A worker process with dask, distributed and NumPy loaded already holds ~150 MiB.
    limit = 320 * 2**20
    shape, chunks = (5, 10240, 16, 128), (1, 512, 16, 128)
    settings = {
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
        "distributed.worker.memory.terminate": 0.95,
        "distributed.logging.distributed": "error",
    }
    with (
        dask.config.set(settings),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=limit,
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        x = da.random.default_rng(0).standard_normal(shape, chunks=chunks, dtype=np.float32)
        assert x.nbytes > limit
        offset = 12345
        y = anyrope.rotate(x, offset)
        assert y.chunks == x.chunks
        matches = da.map_blocks(_block_matches, x, y, offset=offset, dtype=bool, chunks=(1,) * 4)
        assert bool(client.compute(matches.all()).result())
        assert len(client.scheduler_info()["workers"]) == 2


def _block_matches(x_block, y_block, *, offset, block_info=None):
    start = block_info[0]["array-location"][1][0]
    positions = np.arange(offset + start, offset + start + x_block.shape[1])
    expected = anyrope.rotate(x_block, positions)
    return np.array(np.array_equal(y_block, expected)).reshape((1,) * 4)
