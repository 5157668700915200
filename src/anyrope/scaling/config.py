"""The scaling description: a frozen, validated :class:`RopeScaling` and its parser.

:func:`parse_rope_scaling` reads a Hugging Face ``rope_scaling`` / ``rope_parameters``
dict (``rope_type`` or the older ``type``). Every key is checked: a missing required
key, a key the method does not use, a value out of range or two keys that disagree
is a ``ValueError`` (``TypeError`` for a wrong type) naming the key, never a silent
default that would change the model.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from .._validation import check_base
from . import _registry
from ._checks import factor_list, positive_int, positive_int_list, real
from ._types import FloatArray, IntArray

# isort: off
# Importing a method's module registers it, in this order: the order of ROPE_TYPES and of
# the names listed in error messages. A new method is one more name on this line.
from . import default, linear, ntk, dynamic, yarn, longrope, llama3, axial, proportional  # noqa: F401
# isort: on

__all__ = ["ROPE_TYPES", "RopeScaling", "parse_rope_scaling"]

ROPE_TYPES = _registry.names()
"""Every ``rope_type`` anyrope computes (``"mrope"`` is read as ``"default"`` with sections).

The built-in methods, in registration order; a method registered later is accepted
everywhere but not listed here.
"""

_ALIASES = {"mrope": "default"}
_ANY_TYPE_KEYS = frozenset(
    {
        "rope_type",
        "type",
        "rope_theta",
        "partial_rotary_factor",
        "mrope_section",
        "mrope_interleaved",
    }
)
# The RopeScaling fields that hold a real number; a scaling dict's are converted in this
# order, so the first bad one is the one named.
_REAL_FIELDS = (
    "factor",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "low_freq_factor",
    "high_freq_factor",
    "rope_theta",
    "partial_rotary_factor",
)


def _method(kind: object, alternatives: str = "") -> _registry.Method:
    # Looked up on every call of a length-dependent RoPE: no tuple of names built.
    if isinstance(kind, str):
        try:
            return _registry.get(kind)
        except KeyError:
            pass
    raise ValueError(
        f"`rope_type` must be one of {', '.join(map(repr, _registry.names()))}"
        f"{alternatives}; got {kind!r}"
    )


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """A validated frequency-scaling description (float64 arithmetic happens in its methods).

    Build one with :func:`~anyrope.scaling.parse_rope_scaling` from a Hugging Face dict,
    or directly.
    ``max_position_embeddings`` (``L_max``) comes from the model config, outside the
    scaling dict; ``original_max_position_embeddings`` (``L0``) is the pre-extension
    context. ``rope_theta`` and ``partial_rotary_factor`` are recorded when the dict
    carries them (newer transformers ``rope_parameters``) so callers can check them.
    ``mrope_interleaved`` gives the pairs of the ``mrope_section`` streams in turn
    (Qwen3-VL) instead of in contiguous runs (Qwen2-VL).

    Examples
    --------
    >>> from anyrope.scaling import RopeScaling
    >>> scaling = RopeScaling("linear", factor=4.0)
    >>> inv_freq, attention_factor = scaling.frequencies(4, 10000.0)
    >>> inv_freq.tolist(), attention_factor
    ([0.25, 0.0025], 1.0)
    """

    rope_type: str = "default"
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    attention_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    mrope_section: tuple[int, ...] | None = None
    axial_sections: tuple[int, ...] | None = None
    rope_theta: float | None = None
    partial_rotary_factor: float | None = None
    mrope_interleaved: bool = False

    def __post_init__(self) -> None:
        kind = self.rope_type
        method = _method(kind)
        # Lists (longrope's factors) are left to the method's own hook, which names the pair.
        for key in method.required:
            if key in _REAL_FIELDS and getattr(self, key) is None:
                raise ValueError(f"`{key}` is required for rope_type={kind!r}")
        if self.factor is not None and real(self.factor, "factor") < 1.0:
            raise ValueError(f"`factor` must be >= 1 for rope_type={kind!r}; got {self.factor!r}")
        for key in ("original_max_position_embeddings", "max_position_embeddings"):
            value = getattr(self, key)
            if value is not None:
                positive_int(value, key)
        if method.needs_max_position_embeddings and self.max_position_embeddings is None:
            raise ValueError(f"`max_position_embeddings` is required for rope_type={kind!r}")
        if method.uses_original and self.original_max_position_embeddings is None:
            raise ValueError(
                f"`original_max_position_embeddings` (or `max_position_embeddings`) is required "
                f"for rope_type={kind!r}"
            )
        if (
            self.attention_factor is not None
            and real(self.attention_factor, "attention_factor") <= 0
        ):
            raise ValueError(f"`attention_factor` must be positive; got {self.attention_factor!r}")
        for key in ("mrope_section", "axial_sections"):
            value = getattr(self, key)
            if value is not None:
                # A list given directly becomes a tuple: the description is hashed as a key.
                object.__setattr__(self, key, positive_int_list(value, key))
        if method.validate is not None:
            method.validate(self)
        if self.mrope_section is not None and method.sections is not None:
            raise ValueError(f"`mrope_section` does not apply to rope_type={kind!r}")
        if not isinstance(self.mrope_interleaved, bool):
            raise TypeError(
                f"`mrope_interleaved` must be true or false; got {self.mrope_interleaved!r}"
            )
        if self.mrope_interleaved and self.mrope_section is None:
            raise ValueError(
                "`mrope_interleaved` needs `mrope_section` (the pairs of each position stream)"
            )
        if self.axial_sections is not None and "axial_sections" not in method.keys:
            raise ValueError(
                f"`axial_sections` does not apply to rope_type={kind!r} (it is a key of "
                "rope_type='axial')"
            )
        if self.rope_theta is not None:
            check_base(self.rope_theta)
        if self.partial_rotary_factor is not None:
            fraction = real(self.partial_rotary_factor, "partial_rotary_factor")
            if not 0.0 < fraction <= 1.0:
                raise ValueError(
                    f"`partial_rotary_factor` must be in (0, 1]; got {self.partial_rotary_factor!r}"
                )

    def __repr__(self) -> str:
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            if isinstance(value, tuple) and len(value) > 4:
                parts.append(f"{field.name}=<{len(value)} values>")
            else:
                parts.append(f"{field.name}={value!r}")
        return f"RopeScaling({', '.join(parts)})"

    def sections(self, rotary_dim: int) -> tuple[int, ...] | None:
        """Return the pairs per position stream (M-RoPE's ``mrope_section``, axial's axes).

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d``; a method that lays out its own streams (axial) splits
            its ``d // 2`` pairs from it (``axial_sections``, else two halves), while
            ``mrope_section`` is returned as given.

        Returns
        -------
        tuple of int or None
            The pairs of each position stream, in order; ``None`` when there is a single
            stream (no ``mrope_section`` and a method without streams of its own).

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> RopeScaling("axial").sections(64), RopeScaling().sections(64)
        ((16, 16), None)
        >>> RopeScaling("axial", axial_sections=(12, 10, 10)).sections(64)
        (12, 10, 10)
        """
        sections = _method(self.rope_type).sections
        return self.mrope_section if sections is None else sections(self, rotary_dim)

    @property
    def partial_rotary_factor_sets_width(self) -> bool:
        """Whether ``partial_rotary_factor`` narrows the rotated width (all but ``proportional``).

        Returns
        -------
        bool
            False for a method that reads the fraction itself and rotates the whole head.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> RopeScaling("proportional", partial_rotary_factor=0.25).partial_rotary_factor_sets_width
        False
        """
        return not _method(self.rope_type).reads_partial_rotary_factor

    @property
    def depends_on_length(self) -> bool:
        """Whether the frequencies change with the sequence length (dynamic, longrope).

        Returns
        -------
        bool
            True when the method has a :meth:`length_bucket` hook, so that tables must be
            rebuilt when a sequence falls in another bucket.
        """
        return _method(self.rope_type).length_bucket is not None

    def length_bucket(self, seq_len: int | None) -> int:
        """Key under which tables for a sequence of ``seq_len`` positions can be shared.

        Two lengths with the same bucket give the same frequencies: for ``dynamic``
        every length up to ``max_position_embeddings`` shares one bucket and each
        longer length has its own; for ``longrope`` there are two buckets (short,
        long); other methods have one.

        Parameters
        ----------
        seq_len : int or None
            The length of the sequence (``max position + 1``); ``None`` before any
            sequence is seen.

        Returns
        -------
        int
            The bucket: ``max(seq_len, max_position_embeddings)`` for ``dynamic`` (with
            ``None`` counting as ``max_position_embeddings``), 0 (short) or 1 (long) for
            ``longrope``, and 0 for a method whose frequencies do not depend on the length.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> scaling = RopeScaling("dynamic", factor=2.0, max_position_embeddings=4096)
        >>> scaling.length_bucket(10), scaling.length_bucket(5000)
        (4096, 5000)
        """
        bucket = _method(self.rope_type).length_bucket
        return 0 if bucket is None else bucket(self, seq_len)

    @property
    def softmax_scale(self) -> float:
        """Multiplier for the attention softmax scale (DeepSeek YaRN), else 1.0.

        Returns
        -------
        float
            The factor by which attention multiplies its usual ``1 / sqrt(head_dim)``; 1.0
            for a method without a softmax-scale hook.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> s = RopeScaling("yarn", factor=40.0, mscale=1.0, mscale_all_dim=1.0,
        ...                 original_max_position_embeddings=4096)
        >>> round(s.softmax_scale, 6)
        1.873854
        """
        scale = _method(self.rope_type).softmax_scale
        return 1.0 if scale is None else scale(self)

    def check_rotary_dim(self, rotary_dim: int) -> None:
        """Raise ``ValueError`` if per-pair lists do not fit ``rotary_dim // 2`` pairs.

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d`` the frequencies are to be computed for.

        Raises
        ------
        ValueError
            If the method cannot use ``rotary_dim`` (``ntk`` and ``dynamic`` need more
            than 2, ``axial`` a multiple of 4 without ``axial_sections``), or if
            ``short_factor``, ``long_factor``, ``mrope_section`` or ``axial_sections`` does
            not fit ``rotary_dim // 2`` pairs.
        """
        pairs = rotary_dim // 2
        check = _method(self.rope_type).check_rotary_dim
        if check is not None:
            check(self, rotary_dim)
        for key in ("short_factor", "long_factor"):
            factors = getattr(self, key)
            if factors is not None and len(factors) != pairs:
                raise ValueError(
                    f"`{key}` must have rotary_dim // 2 = {pairs} entries; got {len(factors)}"
                )
        if self.mrope_section is not None and sum(self.mrope_section) != pairs:
            raise ValueError(
                f"`mrope_section` must sum to rotary_dim // 2 = {pairs}; got "
                f"{list(self.mrope_section)} (sum {sum(self.mrope_section)})"
            )

    def frequencies(
        self, rotary_dim: int, base: float, *, seq_len: int | None = None
    ) -> tuple[FloatArray, float]:
        """Return ``(inv_freq, attention_factor)`` in float64 for a sequence of ``seq_len``.

        ``seq_len`` (``max position + 1``) matters only for ``dynamic`` and ``longrope``;
        ``None`` means "no sequence yet" (the configured, unextended frequencies).

        Parameters
        ----------
        rotary_dim : int
            The rotated width ``d``: positive and even, and accepted by
            :meth:`check_rotary_dim`.
        base : float
            The unscaled RoPE base (``rope_theta``): finite and > 1.
        seq_len : int, optional
            The length of the sequence being processed (``max position + 1``); default
            ``None``, no sequence yet.

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
        return _method(self.rope_type).frequencies(self, rotary_dim, base, seq_len)

    @property
    def frequencies_change_with_every_length(self) -> bool:
        """Whether every length past the trained context has its own frequencies.

        True for ``dynamic``: its tables are built for the positions asked for, and
        :meth:`frequencies_per_length` gives the frequencies of many lengths at once.

        Returns
        -------
        bool
            Whether the method computes frequencies per length.
        """
        return _method(self.rope_type).frequencies_per_length is not None

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
        method = _method(self.rope_type)
        if method.frequencies_per_length is None:
            raise ValueError(
                f"rope_type={self.rope_type!r} has the same frequencies for many lengths; "
                "use frequencies()"
            )
        many = method.frequencies_per_length(self, rotary_dim, base, lengths)
        return many, _attention_factor(self, rotary_dim, base)


@functools.lru_cache(maxsize=64)
def _attention_factor(scaling: RopeScaling, rotary_dim: int, base: float) -> float:
    """The attention factor of a method whose frequencies change with every length (the
    same for all lengths): computed once, not with every block of lengths."""
    return _method(scaling.rope_type).frequencies(scaling, rotary_dim, base, None)[1]


def _rope_type(scaling: Mapping[str, Any]) -> _registry.Method:
    new, old = scaling.get("rope_type"), scaling.get("type")
    if new is not None and old is not None and new != old:
        raise ValueError(f"`rope_type` and `type` disagree: rope_type={new!r}, type={old!r}")
    kind = new if new is not None else old
    if kind is None:
        kind = "default"
    if not isinstance(kind, str):
        raise TypeError(f"`rope_type` must be a string; got {kind!r}")
    return _method(_ALIASES.get(kind, kind), " (or 'mrope')")


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
        The scaling dict (keys as in transformers; ``None`` values count as absent),
        an existing :class:`~anyrope.RopeScaling`, or ``None`` for no scaling.
    max_position_embeddings : int, optional
        The model's ``max_position_embeddings`` (``L_max``, top level of config.json).
    original_max_position_embeddings : int, optional
        A top-level ``original_max_position_embeddings`` (Phi-3 keeps it there). It must
        agree with the dict's if both are given. When neither is given, ``yarn``,
        ``longrope`` and ``llama3`` use ``max_position_embeddings`` (as transformers does).

    Returns
    -------
    RopeScaling
        The validated description: ``rope_type="default"`` for ``None``, and for a
        :class:`~anyrope.RopeScaling` the same one with the lengths it lacks filled in from the
        arguments.

    Raises
    ------
    ValueError, TypeError
        Naming the offending key: unknown ``rope_type``, a missing required key, a key
        the method does not use, a value out of range, or two sources that disagree.

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
        return _merge_lengths(scaling, max_position_embeddings, original_max_position_embeddings)
    if scaling is None:
        return RopeScaling(max_position_embeddings=max_position_embeddings)
    if not isinstance(scaling, Mapping):
        raise TypeError(
            f"`scaling` must be a dict (Hugging Face rope_scaling), a RopeScaling or None; "
            f"got {type(scaling).__name__}"
        )
    method = _rope_type(scaling)
    kind = method.rope_type
    given = {key: value for key, value in scaling.items() if value is not None}
    allowed = _ANY_TYPE_KEYS | method.keys
    unknown = sorted(str(key) for key in given if key not in allowed)
    if unknown:
        raise ValueError(
            f"rope_type={kind!r} does not use {', '.join(f'`{key}`' for key in unknown)}; "
            f"its keys are {', '.join(sorted(allowed - {'type'}))}"
        )
    for key in method.required:
        if key not in given:
            raise ValueError(f"`{key}` is required for rope_type={kind!r}")
    if scaling.get("type") == "mrope" and "mrope_section" not in given:
        raise ValueError("`mrope_section` is required for type='mrope'")
    fields: dict[str, Any] = {"rope_type": kind, "max_position_embeddings": max_position_embeddings}
    for key in _REAL_FIELDS:
        if key in given:
            fields[key] = real(given[key], key)
    if "truncate" in given:
        fields["truncate"] = given["truncate"]
    for key in ("short_factor", "long_factor"):
        if key in given:
            fields[key] = factor_list(given[key], key)
    for key in ("mrope_section", "axial_sections"):
        if key in given:
            fields[key] = positive_int_list(given[key], key)
    if "mrope_interleaved" in given:
        fields["mrope_interleaved"] = given["mrope_interleaved"]
    inner = given.get("original_max_position_embeddings")
    if inner is not None:
        inner = positive_int(inner, "original_max_position_embeddings")
    fields["original_max_position_embeddings"] = _original_length(
        method.uses_original, inner, original_max_position_embeddings, max_position_embeddings
    )
    return RopeScaling(**fields)


def _original_length(
    uses_original: bool, inner: int | None, outer: int | None, max_position_embeddings: int | None
) -> int | None:
    if inner is not None and outer is not None and inner != outer:
        raise ValueError(
            "`original_max_position_embeddings` disagrees between the scaling dict "
            f"({inner}) and the model config ({outer})"
        )
    original = inner if inner is not None else outer
    if original is None and uses_original:
        return max_position_embeddings
    return original


def _merge_lengths(
    scaling: RopeScaling, max_position_embeddings: int | None, original: int | None
) -> RopeScaling:
    updates: dict[str, Any] = {}
    for key, value in (
        ("max_position_embeddings", max_position_embeddings),
        ("original_max_position_embeddings", original),
    ):
        if value is None:
            continue
        current = getattr(scaling, key)
        if current is None:
            updates[key] = value
        elif current != value:
            raise ValueError(
                f"`{key}` disagrees: the RopeScaling has {current}, the call gives {value}"
            )
    return dataclasses.replace(scaling, **updates) if updates else scaling
