"""The registry of scaling methods: one :class:`Method` per ``rope_type``.

Each method module (:mod:`~anyrope.scaling.linear`, :mod:`~anyrope.scaling.yarn`, ...)
ends by registering a :class:`Method` that says which keys of a ``rope_scaling`` dict it
takes and how its frequencies are computed; :mod:`~anyrope.scaling.config` holds no
per-method knowledge and asks the registry instead. Imports point down only: this
module imports no method module and not ``config``, so hooks see the scaling
description through the :class:`ScalingFields` protocol.

Notes
-----
To add a scaling method, write ``src/anyrope/scaling/<name>.py`` with its formulas as
plain functions, and at the bottom
``register(Method("<name>", frequencies=..., keys=..., required=...))`` with the hooks it
needs. Then add ``<name>`` to the ordered import of method modules in
``config.py``: importing a module registers it, and that line's order is the order of
``ROPE_TYPES``. (Listing the module in ``scaling/__init__.py`` as well makes it
reachable as ``anyrope.scaling.<name>``.) A method can only read the fields
:class:`ScalingFields` lists: a new parameter needs a new ``RopeScaling`` field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from ._types import FloatArray, IntArray

__all__ = ["Method", "ScalingFields", "get", "names", "register", "unregister"]


class ScalingFields(Protocol):
    """The fields of :class:`~anyrope.scaling.RopeScaling` that a method's hooks read.

    Hooks only see a validated description: by the time ``frequencies`` runs, the
    method's ``required`` keys are set and its ``validate`` hook has passed.
    """

    @property
    def rope_type(self) -> str: ...
    @property
    def factor(self) -> float | None: ...
    @property
    def original_max_position_embeddings(self) -> int | None: ...
    @property
    def max_position_embeddings(self) -> int | None: ...
    @property
    def attention_factor(self) -> float | None: ...
    @property
    def beta_fast(self) -> float: ...
    @property
    def beta_slow(self) -> float: ...
    @property
    def mscale(self) -> float | None: ...
    @property
    def mscale_all_dim(self) -> float | None: ...
    @property
    def truncate(self) -> bool: ...
    @property
    def low_freq_factor(self) -> float | None: ...
    @property
    def high_freq_factor(self) -> float | None: ...
    @property
    def short_factor(self) -> tuple[float, ...] | None: ...
    @property
    def long_factor(self) -> tuple[float, ...] | None: ...
    @property
    def partial_rotary_factor(self) -> float | None: ...
    @property
    def axial_sections(self) -> tuple[int, ...] | None: ...


@dataclasses.dataclass(frozen=True)
class Method:
    """Everything :class:`~anyrope.scaling.RopeScaling` needs to know about one ``rope_type``.

    Parameters
    ----------
    rope_type : str
        The name in ``rope_scaling["rope_type"]``.
    frequencies : callable
        ``frequencies(scaling, rotary_dim, base, seq_len) -> (inv_freq, attention_factor)``:
        float64 inverse frequencies of shape ``(rotary_dim // 2,)`` and the factor that
        multiplies cos and sin. ``seq_len`` is ``None`` before any sequence is seen.
    keys : frozenset of str
        The method's keys in a scaling dict, beyond those every method takes
        (``rope_type``, ``type``, ``rope_theta``, ``partial_rotary_factor``,
        ``mrope_section``); any other key is an error.
    required : tuple of str
        Keys the dict must give, checked in this order; a subset of ``keys``.
        :class:`~anyrope.scaling.RopeScaling` itself requires the real-number ones before
        its range checks and leaves required lists to ``validate``.
    uses_original : bool
        Whether the method reads ``original_max_position_embeddings``; when the config
        gives none, ``max_position_embeddings`` stands in (as in transformers), and a
        description with neither is an error.
    needs_max_position_embeddings : bool
        Whether a description without ``max_position_embeddings`` is an error.
    validate : callable, optional
        ``validate(scaling)``: raise ``ValueError`` or ``TypeError`` for method-specific
        field values, after the checks every method shares.
    check_rotary_dim : callable, optional
        ``check_rotary_dim(scaling, rotary_dim)``: raise ``ValueError`` for a rotary width
        the method cannot use.
    length_bucket : callable, optional
        ``length_bucket(scaling, seq_len) -> int``: equal buckets give equal frequencies.
        ``None`` means the frequencies do not depend on the sequence length.
    softmax_scale : callable, optional
        ``softmax_scale(scaling) -> float``: multiplier of the attention softmax scale;
        ``None`` means 1.0.
    sections : callable, optional
        ``sections(scaling, rotary_dim) -> tuple of int``: pairs per position stream for a
        method that lays out several streams itself (axial); such a method takes no
        ``mrope_section``.
    reads_partial_rotary_factor : bool
        Whether the method reads ``partial_rotary_factor`` itself (``proportional``):
        the whole head is then rotated, and the fraction does not set the rotary width.
    frequencies_per_length : callable, optional
        ``frequencies_per_length(scaling, rotary_dim, base, lengths) -> inv_freq`` of
        shape ``(len(lengths), rotary_dim // 2)``, bit for bit the ``frequencies`` of each
        length, for a method whose frequencies change with every length past the trained
        context (dynamic NTK): decoding then computes those of many lengths at once, and
        tables of such a length are built for the positions asked for only.

    Raises
    ------
    ValueError
        If a required key is not among ``keys``.

    Examples
    --------
    >>> from anyrope.scaling import default
    >>> from anyrope.scaling._registry import Method
    >>> toy = Method("toy", lambda s, d, b, n: (default.inv_freq(d, b), 1.0))
    >>> toy.keys, toy.required, toy.length_bucket is None
    (frozenset(), (), True)
    """

    rope_type: str
    frequencies: Callable[[ScalingFields, int, float, int | None], tuple[FloatArray, float]]
    keys: frozenset[str] = frozenset()
    required: tuple[str, ...] = ()
    uses_original: bool = False
    needs_max_position_embeddings: bool = False
    validate: Callable[[ScalingFields], None] | None = None
    check_rotary_dim: Callable[[ScalingFields, int], None] | None = None
    length_bucket: Callable[[ScalingFields, int | None], int] | None = None
    softmax_scale: Callable[[ScalingFields], float] | None = None
    sections: Callable[[ScalingFields, int], tuple[int, ...]] | None = None
    reads_partial_rotary_factor: bool = False
    frequencies_per_length: Callable[[ScalingFields, int, float, IntArray], FloatArray] | None = (
        None
    )

    def __post_init__(self) -> None:
        # A required key outside `keys` would make every scaling dict for the method fail.
        stray = [key for key in self.required if key not in self.keys]
        if stray:
            raise ValueError(
                f"rope_type={self.rope_type!r} requires {', '.join(map(repr, stray))} "
                "but does not list it in `keys`"
            )


_METHODS: dict[str, Method] = {}


def register(method: Method) -> None:
    """Add ``method`` to the registry, after those registered before it.

    Parameters
    ----------
    method : Method
        The method to add; its ``rope_type`` becomes a name :func:`get` accepts.

    Raises
    ------
    ValueError
        If a method with the same ``rope_type`` is already registered.

    Examples
    --------
    >>> from anyrope.scaling import _registry
    >>> _registry.register(_registry.get("default"))
    Traceback (most recent call last):
    ...
    ValueError: rope_type='default' is already registered
    """
    if method.rope_type in _METHODS:
        raise ValueError(f"rope_type={method.rope_type!r} is already registered")
    _METHODS[method.rope_type] = method


def unregister(rope_type: str) -> Method:
    """Remove and return the method registered as ``rope_type``.

    Parameters
    ----------
    rope_type : str
        The name the method was registered under.

    Returns
    -------
    Method
        The method removed from the registry.

    Raises
    ------
    KeyError
        If no method is registered under that name.
    """
    return _METHODS.pop(rope_type)


def get(rope_type: str) -> Method:
    """Return the method registered as ``rope_type``.

    Parameters
    ----------
    rope_type : str
        The name the method was registered under (an alias such as ``"mrope"`` is not
        one).

    Returns
    -------
    Method
        The registered method.

    Raises
    ------
    KeyError
        If no method is registered under that name.

    Examples
    --------
    >>> from anyrope.scaling import _registry
    >>> _registry.get("linear").required
    ('factor',)
    """
    return _METHODS[rope_type]


def names() -> tuple[str, ...]:
    """Return the registered ``rope_type`` names in registration order.

    Returns
    -------
    tuple of str
        One name per registered method: the built-in ones first, in the order
        :mod:`~anyrope.scaling.config` imports them, then any registered later.

    Examples
    --------
    >>> from anyrope.scaling import _registry
    >>> _registry.names()[:3]
    ('default', 'linear', 'ntk')
    """
    return tuple(_METHODS)
