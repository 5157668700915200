"""The paths that rotate a :class:`~anyrope._plan.Plan`, and the registry that picks one.

A path is any object, usually a module, of the type :class:`Path`. :data:`AUTO_ORDER` is
the order ``impl="auto"`` tries them in: the fastest first, the reference last (it rejects
nothing). A new path is one module here and one entry in :data:`AUTO_ORDER`
(docs/architecture.rst, "Adding a path"). :data:`ROUTES` hold the libraries whose arrays
are rotated as those of another (dask's blocks, JAX CPU arrays as NumPy views): they take
a call before it is planned.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

from .._call import Call
from .._namespace import Array
from .._plan import Plan
from .._validation import check_choice
from . import blocked, cuda, dask, jax_cpu, jax_host, numba_cpu, reference


class Path(Protocol):
    """What a path has: mypy checks every entry of :data:`AUTO_ORDER` against it."""

    NAME: str
    """The value of ``impl=`` that asks for it."""
    CHECKS_POSITIONS: bool
    """Whether :meth:`run` checks the values of a position array where it reads them, so
    a plan may reach it with positions left unread on a GPU (``Plan.unread``); otherwise
    the pipeline reads and checks them first."""
    TABLES: str
    """The form of the tables :meth:`run` reads in ``plan.tables`` (one of
    :data:`anyrope._plan.TABLE_FORMS`), fetched before it runs."""

    def rejects(self, plan: Plan, /) -> str | None:
        """Why it cannot take ``plan`` (a phrase that follows "`impl`='NAME'"), or ``None``."""

    def run(self, plan: Plan, /) -> tuple[Array, ...]:
        """The rotated arrays: the bits of the reference path."""


class Route(Protocol):
    """A library whose arrays are rotated as arrays of another: it takes a call before it
    is planned, and rotates it by the pipeline's function it is given (which sits above
    it) on arrays that a path takes."""

    NAME: str
    LIBRARY: str
    """The module that defines its arrays: none exists before it is imported."""

    def takes(self, x: object, /) -> bool:
        """Whether ``x`` is an array of its library: the type of ``x`` decides it, and
        :func:`route_of` keeps the answer by type."""

    def inner(self, call: Call, /) -> Call:
        """The call whose path rotates ``call`` (its blocks, or its views)."""

    rotate: Callable[..., tuple[Array, ...]]
    """``rotate(rotate_arrays, sources, call, *, head_dim, interleaved)``."""


Bound = Callable[[tuple[Array, ...], object], "tuple[Array, ...] | None"]
"""``bound(arrays, positions)``: a later call of a plan's geometry, run with that plan's
tables and launches, only its addresses bound; ``None``, having launched nothing, for a
call it does not serve (its positions past those tables), which is then planned in full."""


def binder(path: Path) -> Callable[[Plan], Bound | None] | None:
    """What binds a plan ``path`` has just run (its tables fetched) for the later calls
    of its geometry, or ``None`` for a path that binds none: a path may define
    ``bind(plan)``, returning a :data:`Bound` or ``None`` (the CUDA kernel's, whose
    decode step would spend most of its time planning)."""
    found: Callable[[Plan], Bound | None] | None = getattr(path, "bind", None)
    return found


AUTO_ORDER: tuple[Path, ...] = (cuda, numba_cpu, blocked, jax_cpu, reference)
"""Paths in the order ``impl="auto"`` tries them."""

PATHS: dict[str, Path] = {path.NAME: path for path in AUTO_ORDER}
"""Every path by its ``impl`` name."""

IMPLS: tuple[str, ...] = ("auto", *PATHS)
"""Every accepted value of ``impl``."""

ROUTES: tuple[Route, ...] = (dask, jax_host)
"""The routes, asked before a call is planned: dask arrays block by block, eager JAX
arrays on the CPU as NumPy views."""


def choose(impl: str, plan: Plan) -> Path:
    """The path for ``plan``: the one named by ``impl``, or the first that takes it.

    Raises
    ------
    ValueError
        For an unknown ``impl``, or a named path that rejects the plan (saying why).
    """
    check_choice(impl, "impl", IMPLS)
    if impl == "auto":
        for path in AUTO_ORDER:
            if _rejects(path, plan) is None:
                return path
    path = PATHS[impl]
    reason = _rejects(path, plan)
    if reason is not None:
        raise ValueError(f"`impl`={impl!r} {reason}")
    return path


def route_of(x: Any) -> Route | None:
    """The route that takes ``x``, or ``None`` for the arrays the paths take."""
    key = (type(x), ROUTES)
    if key in _routes_by_type:  # asked at every call: one lookup
        return _routes_by_type[key]
    # No array of a library exists before it is imported: no route takes x then.
    found = next((r for r in ROUTES if r.LIBRARY in sys.modules and r.takes(x)), None)
    _routes_by_type[key] = found
    return found


_routes_by_type: dict[tuple[type, tuple[Route, ...]], Route | None] = {}


def _rejects(path: Path, plan: Plan) -> str | None:
    if plan.unread and not path.CHECKS_POSITIONS:
        # Its tables are indexed on the host's word.
        return (
            "reads the positions on the host, which this call leaves unread (traced, lazy "
            "or captured, or on a GPU with max_positions); use impl='auto' or 'array_api'"
        )
    return path.rejects(plan)
