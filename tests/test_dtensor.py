"""DTensors sharded on the heads or the sequence axis, on two CPU processes (gloo).

Each process rotates its own shard, with the positions of its own tokens: the result
keeps the input's placements, needs no communication, and has the bits of the call on
the whole tensors.
"""

from __future__ import annotations

import itertools
import os
import socket

import pytest

import anyrope

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORLD = 2
AXES = {"bshd": {"heads": 2, "sequence": 1}, "bhsd": {"heads": 1, "sequence": 2}}


def _positions():
    return {
        "none": None,
        "offset": 5,
        "tensor": torch.arange(7) * 3,
        "batch-tensor": torch.arange(14).reshape(2, 7),
        "offsets": anyrope.Offsets(torch.tensor([4, 9])),
        # One position for every token of a row, which the sequence's shards share.
        "row-positions": torch.tensor([[5], [9]]),
        "one-position": torch.tensor([5]),
    }


def _check_shards(rank: int, port: int) -> None:
    """In each process: every sharded axis, layout, positions form and call form (one
    pair of processes for all: each start imports torch)."""
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        rope = anyrope.RoPE(
            16, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
        )
        generator = torch.Generator().manual_seed(0)
        for (layout, axes), axis in itertools.product(AXES.items(), ("heads", "sequence")):
            shape = (2, 7, 4, 16) if layout == "bshd" else (2, 4, 7, 16)
            q = torch.randn(shape, generator=generator)
            k = torch.randn(shape, generator=generator)
            placements = [Shard(axes[axis])]
            for name, positions in _positions().items():
                dq, dk = (distribute_tensor(x, mesh, placements) for x in (q, k))
                with CommDebugMode() as comm:
                    got = rope(dq, dk, positions, layout=layout)
                    single = anyrope.rotate(dq, positions, layout=layout)
                    rope.rotate(dk, positions, layout=layout, inplace=True)
                assert comm.get_total_counts() == 0, (layout, axis, name)
                expected = rope(q, k, positions, layout=layout)
                for y in (*got, single, dk):
                    assert y.placements == tuple(placements), (layout, axis, name)
                for y, e in zip(
                    (*got, single, dk),
                    (*expected, anyrope.rotate(q, positions, layout=layout), expected[1]),
                    strict=True,
                ):
                    assert torch.equal(y.full_tensor(), e), (layout, axis, name)
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # Both ranks are past their last collective. gloo's teardown (destroy_process_group,
    # then the interpreter's exit) can abort with "terminate called without an active
    # exception" on a loaded machine; it is torch's, not under test, so skip it.
    os._exit(0)


def test_dtensors_sharded_on_heads_or_sequence_give_the_unsharded_bits() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_check_shards, args=(port,), nprocs=WORLD)
