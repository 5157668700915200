"""Autograd for torch CUDA tensors through the kernel.

A rotation by ``attention_factor * R(theta)`` is linear; its adjoint is
``attention_factor * R(-theta)``, which is the kernel with ``inverse`` flipped on the
same tables (the pass-through features are the identity both ways). So the backward
pass is one more launch of the same kernel, on the incoming gradients.
"""

from __future__ import annotations

import functools
from typing import Any

from ..._namespace import Array
from ..._plan import Plan
from .launch import Launcher, rotate_raw

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
            outputs = rotate_raw(
                plan, arrays, inverse=plan.inverse, inplace=plan.inplace, launcher=launcher
            )
            if plan.inplace:
                ctx.mark_dirty(*arrays)
            return tuple(outputs)

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
            plan = ctx.plan
            rotated = rotate_raw(
                plan, grads, inverse=not plan.inverse, inplace=False, launcher=ctx.launcher
            )
            return (None, None, *rotated)

    return Rotate


def rotate_with_grad(plan: Plan, *, launcher: Launcher) -> tuple[Array, ...]:
    """The kernel path for tensors that require grad: forward and backward are launches.

    ``launcher`` runs each launch, forward and backward (the CPU tests pass the host
    harness, as for :func:`anyrope._paths.cuda.launch.rotate_raw`).
    """
    result: tuple[Array, ...] = _rotate_function().apply(plan, launcher, *plan.arrays)
    return result
