"""Autograd for torch CUDA tensors through the kernel.

A rotation by ``attention_factor * R(theta)`` is linear; its adjoint is
``attention_factor * R(-theta)``, which is the kernel with ``inverse`` flipped on the
same tables (the pass-through features are the identity both ways). So the backward
pass is one more launch of the same kernel, on the incoming gradients.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .launch import Launcher, _launch_on_device, rotate_raw

if TYPE_CHECKING:
    from .._namespace import Array, Namespace
    from .._positions import Positions
    from .._rope import RoPE

__all__ = ["rotate_with_grad"]


@functools.cache
def _rotate_function() -> Any:
    """The ``torch.autograd.Function``, defined on first use so that importing this module
    (for instance by ``pytest --doctest-modules``) does not need torch."""
    import torch

    class Rotate(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any,
            rope: RoPE,
            where: Positions,
            options: dict[str, Any],
            *arrays: torch.Tensor,
        ) -> tuple[torch.Tensor, ...]:
            ctx.rope, ctx.where, ctx.options = rope, where, options
            outputs = rotate_raw(rope, arrays, where, **options)
            if options["inplace"]:
                ctx.mark_dirty(*arrays)
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
            options = dict(ctx.options, inverse=not ctx.options["inverse"], inplace=False)
            rotated = rotate_raw(ctx.rope, grads, ctx.where, **options)
            return (None, None, None, *rotated)

    return Rotate


def rotate_with_grad(
    rope: RoPE,
    arrays: tuple[Array, ...],
    where: Positions,
    *,
    layout: str,
    inverse: bool,
    inplace: bool,
    xp: Namespace,
    launcher: Launcher = _launch_on_device,
) -> tuple[Array, ...]:
    """:func:`anyrope._cuda.launch.rotate_cuda` for tensors that require grad.

    ``launcher`` runs each launch, forward and backward (the CPU tests pass the host
    harness, as for :func:`anyrope._cuda.launch.rotate_raw`).
    """
    options = {
        "layout": layout,
        "inverse": inverse,
        "inplace": inplace,
        "xp": xp,
        "launcher": launcher,
    }
    result: tuple[Array, ...] = _rotate_function().apply(rope, where, options, *arrays)
    return result
