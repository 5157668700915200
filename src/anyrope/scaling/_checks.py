"""How a scaling record's fields are read: one check per field, found from its type.

A field typed ``float``, ``int``, ``bool``, ``tuple[float, ...]`` or ``tuple[int, ...]``
(optionally ``| None``) gets the check of its kind (:data:`CHECK_OF_TYPE`); a type from
this module (:data:`Factor`, :data:`Positive`, :data:`Fraction`, :data:`Base`) carries a
narrower check of its own. Each check names the key in its message, so that a bad
config points at its line.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeAlias

from .._validation import MAX_POSITION, check_base, check_int, check_real

Check: TypeAlias = Callable[[Any, str], Any]


def real(value: object, key: str) -> float:
    """Return ``value`` as a finite float.

    Parameters
    ----------
    value : object
        The value to check, as read from a scaling dict or a field.
    key : str
        The name of the key, quoted in the error message.

    Returns
    -------
    float
        ``value`` converted with :class:`float`.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (``bool`` is not one here).
    ValueError
        If it is infinite or NaN.
    """
    try:
        return check_real(value, key, -math.inf)
    except ValueError:  # no bound to name: the key's only rule is to be finite
        raise ValueError(f"`{key}` must be finite; got {value!r}") from None


def positive_int(value: object, key: str) -> int:
    """Return ``value`` as a positive ``int``.

    Parameters
    ----------
    value : object
        The value to check, as read from a scaling dict or a field.
    key : str
        The name of the key, quoted in the error message.

    Returns
    -------
    int
        ``value`` as a built-in ``int``, greater than 0.

    Raises
    ------
    TypeError
        If ``value`` is not an integer (``bool`` is not one here).
    ValueError
        If it is zero, negative or above ``2**53`` (a length no position reaches).
    """
    return check_int(value, key, 1, MAX_POSITION + 1, "a positive integer at most 2**53")


def flag(value: object, key: str) -> bool:
    """Return ``value`` if it is a ``bool``.

    Parameters
    ----------
    value : object
        The value to check, as read from a scaling dict or a field.
    key : str
        The name of the key, quoted in the error message.

    Returns
    -------
    bool
        ``value`` itself.

    Raises
    ------
    TypeError
        If ``value`` is not ``True`` or ``False`` (1 and 0 are not: a config says true
        or false).
    """
    if not isinstance(value, bool):
        raise TypeError(f"`{key}` must be true or false; got {value!r}")
    return value


def check_sum(key: str, sections: Sequence[int] | None, rotary_dim: int) -> None:
    """Raise ``ValueError`` unless the pairs ``sections`` (``None``: no sections) sum to
    ``rotary_dim // 2``, naming ``key`` and the sum received."""
    if sections is not None and sum(sections) != rotary_dim // 2:
        raise ValueError(
            f"`{key}` must sum to rotary_dim // 2 = {rotary_dim // 2}; got "
            f"{list(sections)} (sum {sum(sections)})"
        )


def agreed(sources: Sequence[tuple[str, Any]], where: str = "") -> tuple[str, Any]:
    """Return the first of the ``(key, value)`` ``sources`` whose value is not ``None`` (the
    first source when none is); raise ``ValueError`` naming two present values that differ,
    ``where`` said after them."""
    present = [source for source in sources if source[1] is not None] or [sources[0]]
    (key, value), *others = present
    for other, given in others:
        if given != value:
            raise ValueError(f"`{key}`={value!r} and `{other}`={given!r} disagree{where}")
    return key, value


def _real_in(bounds: str, within: Callable[[float], bool]) -> Check:
    """The check of a finite float for which ``within`` holds, ``bounds`` in its message."""

    def check(value: object, key: str) -> float:
        result = real(value, key)
        if not within(result):
            raise ValueError(f"`{key}` must be {bounds}; got {value!r}")
        return result

    return check


Factor: TypeAlias = Annotated[float, _real_in(">= 1", lambda x: x >= 1.0)]
"""A scaling factor: a finite float >= 1."""

_positive = _real_in("positive", lambda x: x > 0.0)

Positive: TypeAlias = Annotated[float, _positive]
"""A finite float > 0."""

fraction = _real_in("in (0, 1]", lambda x: 0.0 < x <= 1.0)

Fraction: TypeAlias = Annotated[float, fraction]
"""A share of the head: a float in (0, 1]."""

Base: TypeAlias = Annotated[float, lambda value, key: check_base(value)]
"""A RoPE base (``rope_theta``): a finite float > 1."""


def _list_of(entry: Check, entries: str) -> Check:
    """The check of a list (any sequence but a string) of ``entries``, each passing ``entry``
    under the name ``key[index]``; it returns them as a tuple."""

    def check(value: object, key: str) -> tuple[Any, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"`{key}` must be a list of {entries}; got {value!r}")
        return tuple(entry(item, f"{key}[{index}]") for index, item in enumerate(value))

    return check


CHECK_OF_TYPE: dict[object, Check] = {
    float: real,
    int: positive_int,
    bool: flag,
    tuple[float, ...]: _list_of(_positive, "numbers"),
    tuple[int, ...]: _list_of(positive_int, "integers"),
}
"""The check of a field typed with a plain type (integers are lengths or counts, and the
entries of a list of floats are factors: positive)."""


def field_checks(record: type) -> dict[str, Check]:
    """Return the check of each field of the dataclass ``record``, in field order.

    Parameters
    ----------
    record : type
        A dataclass whose field types are those of :data:`CHECK_OF_TYPE` or of this
        module, each optionally ``| None``.

    Returns
    -------
    dict
        Field name -> ``check(value, key)``, which returns the value converted (a list
        becomes a tuple) or raises ``TypeError`` / ``ValueError`` naming ``key``.

    Raises
    ------
    TypeError
        If a field's type has no check.

    Examples
    --------
    >>> from anyrope.scaling import _checks, linear
    >>> _checks.field_checks(linear.Linear)["factor"](2, "factor")
    2.0
    """
    hints = typing.get_type_hints(record, include_extras=True)
    checks = {}
    for field in dataclasses.fields(record):
        hint = hints[field.name]
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
        if typing.get_origin(hint) is Annotated:
            checks[field.name] = hint.__metadata__[0]
        elif hint in CHECK_OF_TYPE:
            checks[field.name] = CHECK_OF_TYPE[hint]
        else:
            raise TypeError(
                f"field `{field.name}` of {record.__name__} has type {hint!r}, which has no "
                f"check; use one of {', '.join(map(repr, CHECK_OF_TYPE))} or a type of "
                "anyrope.scaling._checks"
            )
    return checks
