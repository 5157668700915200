"""Per-row offsets, a form of ``positions``: each batch row continues its own KV cache."""

from __future__ import annotations

import sys

import array_api_compat

from ._namespace import Array


class Offsets:
    """Per-row offsets: row ``b`` of a batch starts at position ``values[b]``.

    The tokens of row ``b`` sit at ``values[b], values[b] + 1, ..., values[b] + seq - 1``.

    Pass it as ``positions`` when each row of a batch continues its own KV cache
    (flash-attn's ``seqlen_offsets`` of shape ``(batch,)``, vLLM's per-request context
    lengths). A bare array of shape ``(batch,)`` would mean one position per token of a
    sequence of length ``batch``, and ``(batch, 1)`` one position for every token of a
    row: neither is an offset, hence this wrapper.

    Parameters
    ----------
    values : array of int
        Non-negative offsets of the input's library and device, of shape ``(batch,)``
        (one batch axis) or any shape that broadcasts to the input's batch axes.

    See Also
    --------
    anyrope.rotate : Takes ``positions=Offsets(values)``; with ``layout="thd"`` the
        values are the per-sequence offsets, one per ``cu_seqlens`` sequence.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> q = np.ones((2, 3, 4, 8), dtype=np.float32)     # (batch, seq, heads, head_dim)
    >>> cached = np.array([5, 9])                       # tokens already in each row's cache
    >>> y = anyrope.rotate(q, positions=anyrope.Offsets(cached))
    >>> rows = anyrope.rotate(q, positions=cached[:, None] + np.arange(3))
    >>> bool((y == rows).all())
    True
    """

    __slots__ = ("values",)

    values: Array

    def __init__(self, values: Array) -> None:
        # A torch tensor is taken without array_api_compat, which torch.compile (when it
        # traces a model that builds Offsets) cannot trace without warnings.
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(values, torch.Tensor):
            self.values = values
            return
        if not array_api_compat.is_array_api_obj(values) or isinstance(values, (list, tuple)):
            raise TypeError(
                "`Offsets` takes an integer array of the input's library (one offset per "
                f"batch row); got {type(values).__name__}"
            )
        self.values = values

    def __repr__(self) -> str:
        return f"Offsets({self.values!r})"

    def __reduce__(self) -> tuple[type[Offsets], tuple[Array]]:
        return (Offsets, (self.values,))
