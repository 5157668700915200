"""Autograd for torch CUDA tensors through the kernel.

A rotation by ``a * R(theta)`` (``a`` the attention factor) is linear; its adjoint is
``a * R(-theta)``, which is the kernel with ``inverse`` flipped on the same tables (the
pass-through features are the identity both ways). An ``inverse=True`` call rotates by
``R(-theta) / a`` (the plan's tables divide by ``a``), whose adjoint ``R(theta) / a`` is
again the other sign on the plan's tables. So the backward pass is one more launch of
the same kernel, on the incoming gradients. It is linear in them and does not depend on
the forward's inputs, so a double backward is the forward launch again.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ..._namespace import Array
from ..._plan import Plan
from .dispatch import Launcher, rotate_raw

__all__ = ["rotate_with_grad"]


@functools.cache
def _rotate_function() -> Any:
    """The ``torch.autograd.Function``, defined on first use so that importing this module
    (for instance by ``pytest --doctest-modules``) does not need torch."""
    import torch

    class Rotate(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any, plan: Plan, launcher: Launcher, *arrays: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            ctx.plan, ctx.launcher = plan, launcher
            outputs = rotate_raw(plan, arrays, launcher=launcher)
            if plan.inplace:
                ctx.mark_dirty(*arrays)
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
            # Through this Function again, so that the backward is differentiable too.
            transposed = dataclasses.replace(
                ctx.plan, arrays=grads, inverse=not ctx.plan.inverse, inplace=False
            )
            return (None, None, *_rotate_function().apply(transposed, ctx.launcher, *grads))

    return Rotate


def rotate_with_grad(plan: Plan, *, launcher: Launcher) -> tuple[Array, ...]:
    """The kernel path for tensors that require grad: forward and backward are launches.

    ``launcher`` runs each launch, forward and backward (the CPU tests pass the host
    harness, as for :func:`anyrope._paths.cuda.dispatch.rotate_raw`).
    """
    result: tuple[Array, ...] = _rotate_function().apply(plan, launcher, *plan.arrays)
    return result
