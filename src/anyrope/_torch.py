"""What only PyTorch tensors need: NumPy views of their memory, autograd, tensor
layouts, autograd's modes, and version counters.

Importing this module does not import torch; its functions run for torch tensors only,
when torch is already in ``sys.modules``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._cpu_memory import STORAGE_DTYPES
from ._namespace import Array, dtype_name
from ._offsets import Offsets
from ._validation import describe

_typestr: dict[Any, str] = {}
"""NumPy's ``typestr`` of each torch dtype met (the view's dtype), by the torch dtype."""


class _Memory:
    """Memory described by ``__array_interface__``, for NumPy to view."""

    __slots__ = ("__array_interface__",)

    def __init__(self, interface: dict[str, Any]) -> None:
        self.__array_interface__ = interface


def numpy_view(t: Array) -> np.ndarray[Any, Any]:
    """A NumPy view of a CPU tensor's memory, made from its address.

    float16 and bfloat16 tensors are viewed as ``uint16`` and ``int16``; integer tensors
    (positions) as themselves.
    ``Tensor.numpy()`` would mark the caller's storage as shared with NumPy, after which
    torch refuses to ``resize_()`` it; this view lives only as long as the call.
    """
    typestr = _typestr.get(t.dtype)
    if typestr is None:
        name = dtype_name(t.dtype)
        typestr = _typestr[t.dtype] = np.dtype(STORAGE_DTYPES.get(name, name)).str
    strides = None
    if not t.is_contiguous():
        size = t.element_size()
        strides = tuple(s * size for s in t.stride())
    interface = {
        "data": (t.data_ptr(), False),
        "shape": tuple(t.shape),
        "strides": strides,
        "typestr": typestr,
        "version": 3,
    }
    return np.asarray(_Memory(interface))


def positions_view(t: Array) -> np.ndarray[Any, Any]:
    """The values of CPU positions as a NumPy array: :func:`numpy_view` of the tensor, or
    of a negative view (which marks its memory as negated) a resolved copy."""
    if t.is_neg():
        # The copy is ours alone: NumPy's array keeps it alive.
        return t.resolve_neg().numpy()  # type: ignore[no-any-return]
    return numpy_view(t)


def checked(
    arrays: tuple[Array, ...], names: tuple[str, ...], positions: object, *, inplace: bool
) -> tuple[tuple[Array, ...], bool]:
    """Dense tensors with data (sparse layouts and the meta device are refused by name),
    each with its values in its memory; and whether autograd would record a rotation.

    A tensor with the negative bit set (the imaginary part of a conjugate view,
    ``torch._neg_view``) holds ``-x`` in the memory the paths read through
    ``data_ptr()``. Such a tensor is copied, unless it is rotated in place: a rotation is
    linear and IEEE rounding symmetric, so rotating ``-x`` in its memory leaves there
    exactly ``-R(x)``, which the view reads as ``R(x)``. (A conjugate bit needs a complex
    dtype, which is refused.)
    """
    import torch

    for x, name in zip(arrays, names, strict=True):
        if x.layout != torch.strided:
            raise TypeError(f"`{name}` must be a dense (strided) tensor; got layout {x.layout}")
        if x.device.type == "meta":
            raise ValueError(
                f"`{name}` is on the meta device, which holds no values to rotate; "
                f"got {describe(x)}"
            )
    arrays = tuple(x if inplace or not x.is_neg() else x.resolve_neg() for x in arrays)
    if torch._C._functorch.peek_interpreter_stack() is not None:
        _refuse_mapped(positions)
    return arrays, forward_mode() or (
        torch.is_grad_enabled() and any(x.requires_grad for x in arrays)
    )


def _refuse_mapped(positions: object) -> None:
    """Refuse positions that ``torch.func.vmap`` maps when the arrays reach here wrapped
    by another transform inside it (``vmap(grad(f))``): their values, one per item, cannot
    be read on the host, and the op that maps them takes no ``torch.func.grad``."""
    torch = sys.modules["torch"]
    functorch = torch._C._functorch
    x = positions.values if isinstance(positions, Offsets) else positions
    while isinstance(x, torch.Tensor) and functorch.is_functorch_wrapped_tensor(x):
        if functorch.is_batchedtensor(x):
            raise ValueError(
                "`positions` that torch.func.vmap maps cannot be read under "
                "torch.func.grad inside the vmap (vmap(grad(f))); map the arrays only "
                "(positions shared by every item), or take the gradient of the batched "
                "call: the rotation mixes no rows, so its rows are each item's gradient"
            )
        x = functorch.get_unwrapped(x)


def forward_mode() -> bool:
    """Whether forward-mode autograd is on: inside ``torch.autograd.forward_ad.dual_level``,
    which ``torch.func.jvp`` enters too. Any tensor may then carry a tangent that
    ``requires_grad`` does not show, and that a path writing through raw memory would drop."""
    forward_ad = sys.modules.get("torch.autograd.forward_ad")
    return forward_ad is not None and forward_ad._current_level >= 0


def bump_versions(arrays: tuple[Array, ...]) -> None:
    """Tell autograd that ``arrays`` were written through their raw memory.

    Writes through ``data_ptr()`` do not bump torch's version counter; autograd needs it
    to refuse a backward through a tensor saved before an in-place rotation. Inference
    tensors have no counter (older torch raises when asked to bump one).
    """
    from torch.autograd.graph import increment_version

    for x in arrays:
        if not x.is_inference():
            increment_version(x)
