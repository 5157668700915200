"""The scaling description: :class:`RopeScaling`, the base of one record per method, and its reader.

Each method is a frozen dataclass that subclasses :class:`RopeScaling` and registers
itself (:func:`~anyrope.scaling.register`): its fields are the keys it takes, and each
field's type says how its value is checked (:mod:`~anyrope.scaling._checks`). The fields
of :class:`RopeScaling` itself are the keys every method takes. The reader,
:func:`parse_rope_scaling`, holds no per-key code: a missing required key, a key the
method does not take, a value out of range or two sources that disagree is a
``ValueError`` (``TypeError`` for a wrong type) naming the key, never a silent default
that would change the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from .._validation import check_choice
from ._checks import Base, Check, Fraction, agreed, check_sum, field_checks
from ._types import FloatArray, Frequencies, IntArray

__all__ = ["RopeScaling", "get", "names", "parse_rope_scaling", "register", "unregister"]

_ALIASES = {"mrope": "default"}


class _ByRopeType(type):
    """``RopeScaling(rope_type, **keys)`` builds the record of the method ``rope_type`` names."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is RopeScaling:
            if len(args) > 1:
                raise TypeError(
                    f"RopeScaling takes the method's name, then its keys by keyword (as "
                    f"RopeScaling('linear', factor=4.0)); got {len(args)} positional arguments"
                )
            return _read(*args, **kwargs)
        return super().__call__(*args, **kwargs)


def _read(rope_type: str = "default", /, **keys: Any) -> RopeScaling:
    return parse_rope_scaling({"rope_type": rope_type, **keys})


@dataclasses.dataclass(frozen=True, kw_only=True)
class RopeScaling(metaclass=_ByRopeType):
    """A validated frequency-scaling description: the record of one ``rope_type``.

    ``RopeScaling(rope_type, **keys)`` builds the record of the method ``rope_type``
    names (``linear.Linear``, ``yarn.YaRN``, ...: each a subclass, frozen and hashable),
    as :func:`~anyrope.scaling.parse_rope_scaling` does from a Hugging Face dict; a key
    the method does not take is an error. The fields here are the keys every method
    takes: ``max_position_embeddings`` (``L_max``) comes from the model config, outside
    the scaling dict; ``rope_theta`` and ``partial_rotary_factor`` are recorded when the
    dict carries them (newer transformers ``rope_parameters``) so callers can check them;
    ``mrope_section`` gives M-RoPE's pairs per position stream, and ``mrope_interleaved``
    gives them in turn (Qwen3-VL) instead of in contiguous runs (Qwen2-VL). Reading a key
    of another method gives ``None``.

    Examples
    --------
    >>> from anyrope.scaling import RopeScaling
    >>> scaling = RopeScaling("linear", factor=4.0)
    >>> type(scaling).__name__, scaling.factor, scaling.low_freq_factor
    ('Linear', 4.0, None)
    >>> inv_freq, attention_factor = scaling.frequencies(4, 10000.0)
    >>> inv_freq.tolist(), attention_factor
    ([0.25, 0.0025], 1.0)
    """

    rope_type: ClassVar[str]
    keys: ClassVar[frozenset[str]]
    checks: ClassVar[dict[str, Check]]
    required: ClassVar[tuple[str, ...]] = ()
    depends_on_length: ClassVar[bool] = False
    """Whether the frequencies change with the sequence length (see :meth:`length_bucket`)."""
    frequencies_change_with_every_length: ClassVar[bool] = False
    """Whether every length past the trained context has its own frequencies (dynamic):
    tables are then built for the positions asked for, with :meth:`frequencies_per_length`."""
    partial_rotary_factor_sets_width: ClassVar[bool] = True
    """Whether ``partial_rotary_factor`` narrows the rotated width (all but ``proportional``,
    which reads the fraction itself and rotates the whole head)."""

    max_position_embeddings: int | None = None
    rope_theta: Base | None = None
    partial_rotary_factor: Fraction | None = None
    mrope_section: tuple[int, ...] | None = None
    mrope_interleaved: bool = False

    def __post_init__(self) -> None:
        checks = self.checks
        for key, check in checks.items():
            value = getattr(self, key)
            if value is not None:
                # A list given directly becomes a tuple: the record is hashed as a cache key.
                object.__setattr__(self, key, check(value, key))
        # As in transformers, a method that reads L0 takes L_max when the config gives none.
        original = "original_max_position_embeddings"
        if original in checks and getattr(self, original) is None:
            if self.max_position_embeddings is None:
                raise ValueError(
                    f"`{original}` (or `max_position_embeddings`) is required for "
                    f"rope_type={self.rope_type!r}"
                )
            object.__setattr__(self, original, self.max_position_embeddings)
        if self.mrope_interleaved and self.mrope_section is None:
            raise ValueError(
                "`mrope_interleaved` needs `mrope_section` (the pairs of each position stream)"
            )
        self._validate()

    def __getattr__(self, name: str) -> Any:
        # Code written when one class held every key reads another method's key as None.
        if any(name in method.keys for method in _METHODS.values()):
            return None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        parts = [] if self.rope_type == "default" else [f"rope_type={self.rope_type!r}"]
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            many = isinstance(value, tuple) and len(value) > 4
            shown = f"<{len(value)} values>" if many else repr(value)
            if value != field.default:
                parts.append(f"{field.name}={shown}")
        return f"RopeScaling({', '.join(parts)})"

    def _keys(self, *names: str) -> dict[str, Any]:
        """The values of the keys ``names``, by name: a method's formula takes them as keywords."""
        return {name: getattr(self, name) for name in names}

    def _validate(self) -> None:
        """Raise ``ValueError`` for values that break the method's own rules (a hook)."""

    def _check_rotary_dim(self, rotary_dim: int) -> None:
        """Raise ``ValueError`` for a rotary width the method cannot use (a hook)."""

    def _frequencies(self, rotary_dim: int, base: float, seq_len: int | None) -> Frequencies:
        """``(inv_freq, attention_factor)`` for a checked ``rotary_dim`` (the method's hook)."""
        raise NotImplementedError(f"{type(self).__name__} does not compute frequencies")

    def _frequencies_per_length(
        self, rotary_dim: int, base: float, lengths: IntArray
    ) -> Frequencies:
        """``(inv_freq of each of lengths, attention_factor)`` (a hook of a method whose
        frequencies change with every length)."""
        raise ValueError(
            f"rope_type={self.rope_type!r} has the same frequencies for many lengths; "
            "use frequencies()"
        )

    def sections(self, rotary_dim: int) -> tuple[int, ...] | None:
        """Return the pairs per position stream (M-RoPE's ``mrope_section``, axial's axes).

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d``; a method that lays out its own streams (axial) splits
            its ``d // 2`` pairs from it, while ``mrope_section`` is returned as given.

        Returns
        -------
        tuple of int or None
            The pairs of each position stream, in order; ``None`` when there is a single
            stream.

        Raises
        ------
        ValueError
            If the sections do not sum to ``rotary_dim // 2`` (or, for axial without
            ``axial_sections``, ``rotary_dim`` is not a multiple of 4).

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> RopeScaling("axial").sections(64), RopeScaling().sections(64)
        ((16, 16), None)
        """
        check_sum("mrope_section", self.mrope_section, rotary_dim)
        return self.mrope_section

    def length_bucket(self, seq_len: int | None) -> int:
        """Key under which tables for a sequence of ``seq_len`` positions can be shared.

        Parameters
        ----------
        seq_len : int or None
            The length of the sequence (``max position + 1``); ``None`` before any
            sequence is seen.

        Returns
        -------
        int
            Equal buckets give equal frequencies: 0 for a method whose frequencies do not
            depend on the length; ``max(seq_len, max_position_embeddings)`` for
            ``dynamic``; 0 (short) or 1 (long) for ``longrope``.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> scaling = RopeScaling("dynamic", factor=2.0, max_position_embeddings=4096)
        >>> scaling.length_bucket(10), scaling.length_bucket(5000)
        (4096, 5000)
        """
        return 0

    @property
    def softmax_scale(self) -> float:
        """Multiplier for the attention softmax scale (DeepSeek YaRN), else 1.0.

        Returns
        -------
        float
            The factor by which attention multiplies its usual ``1 / sqrt(head_dim)``.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> s = RopeScaling("yarn", factor=40.0, mscale=1.0, mscale_all_dim=1.0,
        ...                 original_max_position_embeddings=4096)
        >>> round(s.softmax_scale, 6)
        1.873854
        """
        return 1.0

    def check_rotary_dim(self, rotary_dim: int) -> None:
        """Raise ``ValueError`` if the method or ``mrope_section`` cannot use ``rotary_dim``.

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d`` the frequencies are to be computed for.

        Raises
        ------
        ValueError
            If the method cannot use ``rotary_dim`` (``ntk`` and ``dynamic`` need more
            than 2, ``axial`` a multiple of 4 without ``axial_sections``, per-pair lists
            must have ``rotary_dim // 2`` entries), or if ``mrope_section`` does not sum to
            ``rotary_dim // 2``.
        """
        self._check_rotary_dim(rotary_dim)
        self.sections(rotary_dim)

    def frequencies(
        self, rotary_dim: int, base: float, *, seq_len: int | None = None
    ) -> tuple[FloatArray, float]:
        """Return ``(inv_freq, attention_factor)`` in float64 for a sequence of ``seq_len``.

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d``: positive and even, and accepted by
            :meth:`check_rotary_dim`.
        base : float
            The unscaled RoPE base (``rope_theta``): finite and > 1.
        seq_len : int, optional
            The length of the sequence being processed (``max position + 1``), which
            matters only for ``dynamic`` and ``longrope``; default ``None``, no sequence
            yet (the configured, unextended frequencies).

        Returns
        -------
        inv_freq : numpy.ndarray
            The float64 inverse frequencies, shape ``(rotary_dim // 2,)``.
        attention_factor : float
            The factor that multiplies cos and sin (1.0 except for ``yarn`` and
            ``longrope``).

        Raises
        ------
        ValueError
            If :meth:`check_rotary_dim` rejects ``rotary_dim``.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> inv_freq, factor = RopeScaling().frequencies(4, 10000.0)
        >>> inv_freq.tolist(), factor
        ([1.0, 0.01], 1.0)
        """
        self.check_rotary_dim(rotary_dim)
        return self._frequencies(rotary_dim, base, seq_len)

    def frequencies_per_length(
        self, rotary_dim: int, base: float, lengths: IntArray
    ) -> tuple[FloatArray, float]:
        """Return the inverse frequencies of each of ``lengths``, bit for bit.

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d``.
        base : float
            The unscaled RoPE base (``rope_theta``).
        lengths : numpy.ndarray
            Sequence lengths (``max position + 1``), int64.

        Returns
        -------
        inv_freq : numpy.ndarray
            The float64 frequencies, shape ``(len(lengths), rotary_dim // 2)``: row ``j`` is the
            ``inv_freq`` of :meth:`frequencies` with ``seq_len=lengths[j]``.
        attention_factor : float
            The factor that multiplies cos and sin, the same for every length.

        Examples
        --------
        >>> import numpy as np
        >>> from anyrope.scaling import RopeScaling
        >>> s = RopeScaling("dynamic", factor=2.0, max_position_embeddings=10)
        >>> many, factor = s.frequencies_per_length(4, 100.0, np.array([10, 20]))
        >>> bool((many[1] == s.frequencies(4, 100.0, seq_len=20)[0]).all()), factor
        (True, 1.0)
        """
        self.check_rotary_dim(rotary_dim)
        return self._frequencies_per_length(rotary_dim, base, lengths)


_METHODS: dict[str, type[RopeScaling]] = {}

_Record = TypeVar("_Record", bound=type[RopeScaling])


def register(method: _Record) -> _Record:
    """Make the record class ``method`` the one its ``rope_type`` names (a class decorator).

    Parameters
    ----------
    method : type
        A frozen dataclass that subclasses :class:`~anyrope.RopeScaling`, with a class
        attribute ``rope_type``; its fields are the keys it takes (see "Adding a
        scaling method" in the contributor guide).

    Returns
    -------
    type
        ``method`` itself, with ``keys``, the names of its fields.

    Raises
    ------
    ValueError
        If a method with the same ``rope_type`` is already registered.
    TypeError
        If a field's type has no check (``anyrope.scaling._checks.field_checks``).

    Examples
    --------
    >>> from anyrope.scaling import linear, register
    >>> register(linear.Linear)
    Traceback (most recent call last):
    ...
    ValueError: rope_type='linear' is already registered
    """
    if method.rope_type in _METHODS:
        raise ValueError(f"rope_type={method.rope_type!r} is already registered")
    # Kept, not computed per record: torch.compile traces a RoPE made in compiled code.
    method.checks = field_checks(method)
    method.keys = frozenset(method.checks)
    method.required = tuple(
        f.name for f in dataclasses.fields(method) if f.default is dataclasses.MISSING
    )
    _METHODS[method.rope_type] = method
    return method


def unregister(rope_type: str) -> type[RopeScaling]:
    """Remove and return the method registered as ``rope_type``.

    Parameters
    ----------
    rope_type : str
        The name the method was registered under.

    Returns
    -------
    type
        The record class removed from the registry.

    Raises
    ------
    KeyError
        If no method is registered under that name.
    """
    return _METHODS.pop(rope_type)


def get(rope_type: str) -> type[RopeScaling]:
    """Return the record class registered as ``rope_type``.

    Parameters
    ----------
    rope_type : str
        The name the method was registered under (an alias such as ``"mrope"`` is not
        one).

    Returns
    -------
    type
        The registered record class.

    Raises
    ------
    KeyError
        If no method is registered under that name.

    Examples
    --------
    >>> from anyrope.scaling import config
    >>> sorted(config.get("linear").keys - config.get("default").keys)
    ['factor']
    """
    return _METHODS[rope_type]


def names() -> tuple[str, ...]:
    """Return the registered ``rope_type`` names, sorted.

    Returns
    -------
    tuple of str
        One name per registered method.

    Examples
    --------
    >>> from anyrope.scaling import config
    >>> config.names()[:3]
    ('axial', 'default', 'dynamic')
    """
    return tuple(sorted(_METHODS))


def _method(scaling: Mapping[str, Any]) -> type[RopeScaling]:
    _, kind = agreed([("rope_type", scaling.get("rope_type")), ("type", scaling.get("type"))])
    kind = "default" if kind is None else kind
    if not isinstance(kind, str):
        raise TypeError(f"`rope_type` must be a string; got {kind!r}")
    check_choice(kind, "rope_type", (*names(), *_ALIASES))
    return get(_ALIASES.get(kind, kind))


def parse_rope_scaling(
    scaling: Mapping[str, Any] | RopeScaling | None,
    *,
    max_position_embeddings: int | None = None,
    original_max_position_embeddings: int | None = None,
) -> RopeScaling:
    """Read a ``rope_scaling`` / ``rope_parameters`` dict into a :class:`~anyrope.RopeScaling`.

    Parameters
    ----------
    scaling : Mapping, RopeScaling or None
        The scaling dict (keys as in transformers, ``rope_type`` or the older ``type``;
        ``None`` values count as absent), an existing :class:`~anyrope.RopeScaling`, or
        ``None`` for no scaling.
    max_position_embeddings : int, optional
        The model's ``max_position_embeddings`` (``L_max``, top level of config.json).
    original_max_position_embeddings : int, optional
        A top-level ``original_max_position_embeddings`` (Phi-3 keeps it there), for a
        method that takes it. When neither it nor the dict gives one, ``yarn``,
        ``longrope`` and ``llama3`` use ``max_position_embeddings`` (as transformers does).

    Returns
    -------
    RopeScaling
        The validated record of the method: ``rope_type="default"`` for ``None``, and for a
        :class:`~anyrope.RopeScaling` the same one with the lengths it lacks filled in from the
        arguments.

    Raises
    ------
    ValueError, TypeError
        Naming the offending key: unknown ``rope_type``, a missing required key, a key
        the method does not take, a value out of range, or a length given here that
        disagrees with the one in ``scaling``.

    Examples
    --------
    >>> from anyrope.scaling import parse_rope_scaling
    >>> s = parse_rope_scaling({"type": "yarn", "factor": 4.0,
    ...                         "original_max_position_embeddings": 32768})
    >>> s.rope_type, s.factor, s.original_max_position_embeddings
    ('yarn', 4.0, 32768)
    >>> parse_rope_scaling({"rope_type": "llama3", "factor": 8.0})
    Traceback (most recent call last):
    ...
    ValueError: `low_freq_factor` is required for rope_type='llama3'
    """
    if isinstance(scaling, RopeScaling):
        method = type(scaling)
        given = {key: getattr(scaling, key) for key in method.keys}
    elif isinstance(scaling, Mapping) or scaling is None:
        scaling = {} if scaling is None else scaling
        method = _method(scaling)
        given = {key: value for key, value in scaling.items() if key not in ("rope_type", "type")}
        unknown = sorted(str(key) for key in given if key not in method.keys)
        if unknown:
            raise ValueError(
                f"rope_type={method.rope_type!r} does not use "
                f"{', '.join(f'`{key}`' for key in unknown)}; its keys are "
                f"{', '.join(sorted(method.keys))}"
            )
        if scaling.get("type") == "mrope" and given.get("mrope_section") is None:
            raise ValueError("`mrope_section` is required for type='mrope'")
    else:
        raise TypeError(
            f"`scaling` must be a dict (Hugging Face rope_scaling), a RopeScaling or None; "
            f"got {type(scaling).__name__}"
        )
    given = {key: value for key, value in given.items() if value is not None}
    for key, value in (
        ("max_position_embeddings", max_position_embeddings),
        ("original_max_position_embeddings", original_max_position_embeddings),
    ):
        if value is not None and key in method.keys and given.setdefault(key, value) != value:
            raise ValueError(
                f"`{key}` disagrees: {given[key]} in the scaling, {value} in the model config"
            )
    for key in method.required:
        if key not in given:
            raise ValueError(f"`{key}` is required for rope_type={method.rope_type!r}")
    record = method(**given)
    return scaling if record == scaling else record
