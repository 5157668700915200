"""Autograd for torch CUDA tensors through the kernel.

A rotation by ``a * R(theta)`` (``a`` the attention factor) is linear; its adjoint is
``a * R(-theta)``, which is the kernel with ``inverse`` flipped on the same tables (the
pass-through features are the identity both ways). An ``inverse=True`` call rotates by
``R(-theta) / a`` (the plan's tables divide by ``a``), whose adjoint ``R(theta) / a`` is
again the other sign on the plan's tables. So the backward pass is one more launch of
the same kernel, on the incoming gradients. It is linear in them and does not depend on
the forward's inputs, so a double backward is the forward launch again. Forward mode
(``torch.func.jvp``) turns the tangents by the rotation itself: one more launch.
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
        # forward and setup_context apart, as torch.func's transforms (grad, jvp) need.
        @staticmethod
        def forward(plan: Plan, launcher: Launcher, *arrays: torch.Tensor) -> tuple[Any, ...]:
            return tuple(rotate_raw(plan, arrays, launcher=launcher))

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            plan, ctx.launcher, *arrays = inputs
            ctx.plan = plan
            if plan.inplace:
                ctx.mark_dirty(*arrays)

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
            # Through this Function again, so that the backward is differentiable too.
            transposed = dataclasses.replace(
                ctx.plan, arrays=grads, inverse=not ctx.plan.inverse, inplace=False
            )
            return (None, None, *_rotate_function().apply(transposed, ctx.launcher, *grads))

        @staticmethod
        def jvp(ctx: Any, _plan: Any, _launcher: Any, *tangents: Any) -> Any:
            # Linear: a tangent turns as its array does (in place too: torch expects an
            # in-place Function to update the tangents of what it wrote). An array without
            # a tangent has a zero one.
            plan = ctx.plan
            tangents = tuple(
                torch.zeros_like(x) if t is None else t
                for x, t in zip(plan.arrays, tangents, strict=True)
            )
            turned = dataclasses.replace(plan, arrays=tangents)
            outputs = _rotate_function().apply(turned, ctx.launcher, *tangents)
            return outputs if len(outputs) > 1 else outputs[0]

    return Rotate


def rotate_with_grad(plan: Plan, *, launcher: Launcher) -> tuple[Array, ...]:
    """The kernel path for tensors that require grad: forward and backward are launches.

    ``launcher`` runs each launch, forward and backward (the CPU tests pass the host
    harness, as for :func:`anyrope._paths.cuda.dispatch.rotate_raw`).
    """
    result: tuple[Array, ...] = _rotate_function().apply(plan, launcher, *plan.arrays)
    return result
