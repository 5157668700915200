"""The reference path: :func:`~anyrope._paths.rotation.rotate_pairs`, the rotation against
the array API standard, which runs on any array-API library and defines the bits the fast
paths must reproduce; an in-place call writes its result back with one standard
``x[...] = y``.
"""

from __future__ import annotations

import numpy as np

from .._namespace import Array
from .._plan import Plan
from .rotation import rotate_pairs

NAME = "array_api"

CHECKS_POSITIONS = True
"""Positions left unread are gathered with array-API operations, NaN rows out of range
(:func:`~anyrope._tables.gather_rows`): no host read, so traced, lazy and
captured calls take this path."""
TABLES = "placed"


def rejects(plan: Plan) -> str | None:
    """The reference takes every plan."""
    return None


def run(plan: Plan) -> tuple[Array, ...]:
    """Rotate with standard functions only; in place, the result is then written back."""
    xp = plan.xp
    cos, sin, _, _ = plan.tables
    results = []
    # inf * 0 is NaN and a huge pair may overflow: IEEE results the contract keeps
    # (numerical-contract.rst, "What is identical, and what is not"), not something to warn about on
    # NumPy and not elsewhere.
    with np.errstate(invalid="ignore", over="ignore"):
        for x in plan.arrays:
            y = rotate_pairs(
                x,
                cos,
                sin,
                rotary_dim=plan.rotary_dim,
                interleaved=plan.interleaved,
                inverse=plan.inverse,
                xp=xp,
            )
            if plan.inplace:
                x[...] = y
                y = x
            results.append(y)
    return tuple(results)
