"""torch.onnx.export(dynamo=True) of a model using anyrope, run by ONNX Runtime.

Nothing is passed to the exporter: a RoPE with a capacity (``max_positions``) exports as
plain torch ops (a gather of table rows, then the rotation of
numerical-contract.rst, "How every path computes" 3, in float32 for 16-bit inputs), which
ONNX has. ONNX Runtime then gives the eager bits, with dynamic batch and sequence and
the positions as a graph input.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import anyrope

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64}
CAPACITY = 300
SETTINGS = {
    "default": {},
    "yarn": {
        "scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    },
    "interleaved-partial": {"interleaved": True, "rotary_dim": 8, "start_index": 4},
    "xpos": {"scale_base": 64},
}


class Rotary(torch.nn.Module):
    def __init__(self, **options) -> None:
        super().__init__()
        make = anyrope.XPos if "scale_base" in options else anyrope.RoPE
        self.rope = make(16, max_positions=CAPACITY, **options)

    def forward(self, q, k, positions, starts):
        a = self.rope(q, k, positions)
        undo = self.rope.rotate_queries if isinstance(self.rope, anyrope.XPos) else self.rope.rotate
        b = undo(q, anyrope.Offsets(starts), inverse=True)
        return (*a, b)


def _inputs(dtype, batch: int, seq: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seq, 3, 16, generator=generator).to(dtype)
    k = torch.randn(batch, seq, 1, 16, generator=generator).to(dtype)
    positions = torch.randint(0, CAPACITY, (batch, seq), generator=generator)
    starts = torch.randint(0, CAPACITY - seq, (batch,), generator=generator)
    return q, k, positions, starts


def _session(model, dtype):
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    dims = ({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch})
    with warnings.catch_warnings():
        # The exporter's own deprecations and notices, not anyrope's.
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, _inputs(dtype, 2, 5, seed=0), dynamic_shapes=dims, dynamo=True, verbose=False
        )
    ops = {node.op_type for node in program.model_proto.graph.node}
    assert not any("anyrope" in op for op in ops)
    session = ort.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session, [i.name for i in session.get_inputs()]


# Each export takes seconds: every dtype, and every setting once.
@pytest.mark.parametrize(
    ("dtype", "settings"),
    [(dtype, "default") for dtype in DTYPES]
    + [("float16", "yarn"), ("float32", "interleaved-partial"), ("float32", "xpos")],
)
def test_onnx_runtime_gives_the_eager_bits(dtype: str, settings: str) -> None:
    model = Rotary(**SETTINGS[settings])
    session, names = _session(model, DTYPES[dtype])
    for seed, shape in enumerate([(3, 9), (1, 1), (2, 5)], start=1):
        inputs = _inputs(DTYPES[dtype], *shape, seed=seed)
        got = session.run(None, dict(zip(names, (x.numpy() for x in inputs), strict=True)))
        for y, expected in zip(got, model(*inputs), strict=True):
            assert y.shape == tuple(expected.shape)
            # Bits, not values: NaN and signed zeros included.
            assert np.array_equal(y.view(np.uint8), expected.numpy().view(np.uint8))


def test_positions_beyond_the_capacity_give_nan_rows() -> None:
    model = Rotary()
    session, names = _session(model, torch.float32)
    q, k, positions, starts = _inputs(torch.float32, 2, 5, seed=3)
    positions[1, 2] = CAPACITY
    got = session.run(
        None, dict(zip(names, (x.numpy() for x in (q, k, positions, starts)), strict=True))
    )
    assert np.isnan(got[0][1, 2]).all()
    assert not np.isnan(got[0][0]).any()
