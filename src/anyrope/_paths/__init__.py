"""The paths that rotate a :class:`~anyrope._plan.Plan`, and the registry that picks one.

Each path is a module with the same interface:

- ``NAME``: the value of ``impl=`` that asks for it;
- ``rejects(plan) -> str | None``: why it cannot take the plan (a phrase that follows
  "`impl`='NAME'"), or ``None``;
- ``run(plan) -> tuple of arrays``: the rotated arrays, the same bits as the reference.

:data:`AUTO_ORDER` is the order ``impl="auto"`` tries them in: the fastest first, the
reference last (it rejects nothing). A new path is one module here and one entry in
:data:`AUTO_ORDER`.
"""

from __future__ import annotations

from types import ModuleType

from .._plan import Plan
from .._validation import check_impl
from . import blocked, cuda, jax_cpu, numba_cpu, reference

AUTO_ORDER: tuple[ModuleType, ...] = (cuda, numba_cpu, blocked, jax_cpu, reference)
"""Paths in the order ``impl="auto"`` tries them."""

PATHS: dict[str, ModuleType] = {path.NAME: path for path in AUTO_ORDER}
"""Every path by its ``impl`` name."""

IMPLS: tuple[str, ...] = ("auto", *PATHS)
"""Every accepted value of ``impl``."""


def choose(impl: str, plan: Plan) -> ModuleType:
    """The path for ``plan``: the one named by ``impl``, or the first that takes it.

    Raises
    ------
    ValueError
        For an unknown ``impl``, or a named path that rejects the plan (saying why).
    """
    check_impl(impl, IMPLS)
    if impl == "auto":
        for path in AUTO_ORDER:
            if path.rejects(plan) is None:
                return path
    path = PATHS[impl]
    reason = path.rejects(plan)
    if reason is not None:
        raise ValueError(f"`impl`={impl!r} {reason}")
    return path
