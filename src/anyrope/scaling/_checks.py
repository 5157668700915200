"""Value checks shared by :mod:`~anyrope.scaling.config` and the methods' validation hooks.

Each names the offending key in its message, so that a bad config points at its line.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from .._validation import MAX_POSITION

__all__ = ["factor_list", "positive_int", "positive_int_list", "real"]


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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`{key}` must be a real number; got {value!r} of type {type(value).__name__}"
        )
    try:
        result = float(value)
    except OverflowError:  # an int beyond the range of float64
        result = math.inf
    if not math.isfinite(result):
        raise ValueError(f"`{key}` must be finite; got {value!r}")
    return result


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
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{key}` must be an integer; got {value!r} of type {type(value).__name__}")
    if not 0 < int(value) <= MAX_POSITION:
        raise ValueError(f"`{key}` must be a positive integer at most 2**53; got {value!r}")
    return int(value)


def factor_list(value: object, key: str) -> tuple[float, ...]:
    """Return ``value`` as a tuple of positive finite floats.

    Parameters
    ----------
    value : object
        The list to check (any sequence but a string), such as longrope's ``short_factor``.
    key : str
        The name of the key, quoted in the error message; a bad entry is named
        ``key[index]``.

    Returns
    -------
    tuple of float
        The entries converted with :class:`float`, in their order.

    Raises
    ------
    TypeError
        If ``value`` is not a sequence of real numbers (a string is not one here).
    ValueError
        If an entry is infinite, NaN, zero or negative.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"`{key}` must be a list of numbers; got {value!r}")
    factors = tuple(real(item, f"{key}[{index}]") for index, item in enumerate(value))
    bad = [index for index, item in enumerate(factors) if item <= 0.0]
    if bad:
        raise ValueError(
            f"`{key}` entries must be positive; got {factors[bad[0]]!r} at index {bad[0]}"
        )
    return factors


def positive_int_list(value: object, key: str) -> tuple[int, ...]:
    """Return ``value`` as a tuple of positive ``int``.

    Parameters
    ----------
    value : object
        The list to check (any sequence but a string), such as ``mrope_section``.
    key : str
        The name of the key, quoted in the error message; a bad entry is named
        ``key[index]``.

    Returns
    -------
    tuple of int
        The entries as built-in ``int``, in their order.

    Raises
    ------
    TypeError
        If ``value`` is not a sequence of integers (a string is not one here).
    ValueError
        If an entry is zero or negative.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"`{key}` must be a list of integers; got {value!r}")
    return tuple(positive_int(item, f"{key}[{index}]") for index, item in enumerate(value))
