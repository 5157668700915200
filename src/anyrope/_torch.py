"""What only PyTorch tensors need: autograd, tensor layouts, and version counters.

Imported only for torch tensors, when torch is already in ``sys.modules``.
"""

from __future__ import annotations

from ._namespace import Array
from ._validation import describe


def check_tensor(x: Array, name: str) -> None:
    """A dense tensor with data: sparse layouts and the meta device are refused by name."""
    import torch

    if x.layout != torch.strided:
        raise TypeError(f"`{name}` must be a dense (strided) tensor; got layout {x.layout}")
    if x.device.type == "meta":
        raise ValueError(
            f"`{name}` is on the meta device, which holds no values to rotate; got {describe(x)}"
        )


def requires_grad(arrays: tuple[Array, ...]) -> bool:
    """Whether autograd would record a rotation of ``arrays``."""
    import torch

    return torch.is_grad_enabled() and any(x.requires_grad for x in arrays)


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
