"""The scaling description: a frozen, validated :class:`RopeScaling` and its parser.

:func:`parse_rope_scaling` reads a Hugging Face ``rope_scaling`` / ``rope_parameters``
dict (``rope_type`` or the older ``type``). Every key is checked: a missing required
key, a key the method does not use, a value out of range or two keys that disagree
is a ``ValueError`` (``TypeError`` for a wrong type) naming the key, never a silent
default that would change the model.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from .._validation import check_base
from . import axial, default, dynamic, linear, llama3, longrope, ntk, yarn
from ._types import FloatArray

__all__ = ["ROPE_TYPES", "RopeScaling", "parse_rope_scaling"]

ROPE_TYPES = ("default", "linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "axial")
"""Every ``rope_type`` anyrope computes (``"mrope"`` is read as ``"default"`` with sections)."""

_ALIASES = {"mrope": "default"}
_ANY_TYPE_KEYS = frozenset(
    {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section"}
)
_METHOD_KEYS: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "axial": frozenset(),
    "linear": frozenset({"factor"}),
    "ntk": frozenset({"factor"}),
    "dynamic": frozenset({"factor"}),
    "yarn": frozenset(
        {
            "factor",
            "original_max_position_embeddings",
            "attention_factor",
            "beta_fast",
            "beta_slow",
            "mscale",
            "mscale_all_dim",
            "truncate",
        }
    ),
    "longrope": frozenset(
        {
            "short_factor",
            "long_factor",
            "factor",
            "attention_factor",
            "original_max_position_embeddings",
        }
    ),
    "llama3": frozenset(
        {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
    ),
}
_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "default": (),
    "axial": (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "longrope": ("short_factor", "long_factor"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
}
_USES_ORIGINAL = frozenset({"yarn", "longrope", "llama3"})


def _real(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`{key}` must be a real number; got {value!r} of type {type(value).__name__}"
        )
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"`{key}` must be finite; got {value!r}")
    return result


def _positive_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{key}` must be an integer; got {value!r} of type {type(value).__name__}")
    if int(value) <= 0:
        raise ValueError(f"`{key}` must be a positive integer; got {value!r}")
    return int(value)


def _factor_list(value: object, key: str) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"`{key}` must be a list of numbers; got {value!r}")
    factors = tuple(_real(item, f"{key}[{index}]") for index, item in enumerate(value))
    bad = [index for index, item in enumerate(factors) if item <= 0.0]
    if bad:
        raise ValueError(
            f"`{key}` entries must be positive; got {factors[bad[0]]!r} at index {bad[0]}"
        )
    return factors


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """A validated frequency-scaling description (float64 arithmetic happens in its methods).

    Build one with :func:`parse_rope_scaling` from a Hugging Face dict, or directly.
    ``max_position_embeddings`` (``L_max``) comes from the model config, outside the
    scaling dict; ``original_max_position_embeddings`` (``L0``) is the pre-extension
    context. ``rope_theta`` and ``partial_rotary_factor`` are recorded when the dict
    carries them (newer transformers ``rope_parameters``) so callers can check them.

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
    rope_theta: float | None = None
    partial_rotary_factor: float | None = None

    def __post_init__(self) -> None:
        kind = self.rope_type
        if kind not in ROPE_TYPES:
            raise ValueError(
                f"`rope_type` must be one of {', '.join(map(repr, ROPE_TYPES))}; got {kind!r}"
            )
        for key in ("factor", "low_freq_factor", "high_freq_factor"):
            if key in _REQUIRED_KEYS[kind] and getattr(self, key) is None:
                raise ValueError(f"`{key}` is required for rope_type={kind!r}")
        if self.factor is not None and _real(self.factor, "factor") < 1.0:
            raise ValueError(f"`factor` must be >= 1 for rope_type={kind!r}; got {self.factor!r}")
        for key in ("original_max_position_embeddings", "max_position_embeddings"):
            value = getattr(self, key)
            if value is not None:
                _positive_int(value, key)
        if kind == "dynamic" and self.max_position_embeddings is None:
            raise ValueError("`max_position_embeddings` is required for rope_type='dynamic'")
        if kind in _USES_ORIGINAL and self.original_max_position_embeddings is None:
            raise ValueError(
                f"`original_max_position_embeddings` (or `max_position_embeddings`) is required "
                f"for rope_type={kind!r}"
            )
        if (
            self.attention_factor is not None
            and _real(self.attention_factor, "attention_factor") <= 0
        ):
            raise ValueError(f"`attention_factor` must be positive; got {self.attention_factor!r}")
        if kind == "yarn":
            self._check_yarn()
        if kind == "longrope":
            self._check_longrope()
        if kind == "llama3":
            low = _real(self.low_freq_factor, "low_freq_factor")
            high = _real(self.high_freq_factor, "high_freq_factor")
            if low <= 0.0 or high <= low:
                raise ValueError(
                    "`high_freq_factor` must be greater than `low_freq_factor` > 0; got "
                    f"low_freq_factor={self.low_freq_factor!r}, "
                    f"high_freq_factor={self.high_freq_factor!r}"
                )
        if self.mrope_section is not None:
            if kind == "axial":
                raise ValueError("`mrope_section` does not apply to rope_type='axial'")
            for index, size in enumerate(self.mrope_section):
                _positive_int(size, f"mrope_section[{index}]")
        if self.rope_theta is not None:
            check_base(self.rope_theta)
        if self.partial_rotary_factor is not None:
            fraction = _real(self.partial_rotary_factor, "partial_rotary_factor")
            if not 0.0 < fraction <= 1.0:
                raise ValueError(
                    f"`partial_rotary_factor` must be in (0, 1]; got {self.partial_rotary_factor!r}"
                )

    def _check_yarn(self) -> None:
        fast = _real(self.beta_fast, "beta_fast")
        slow = _real(self.beta_slow, "beta_slow")
        if slow <= 0.0 or fast < slow:
            raise ValueError(
                "`beta_fast` must be >= `beta_slow` > 0; got "
                f"beta_fast={self.beta_fast!r}, beta_slow={self.beta_slow!r}"
            )
        for key in ("mscale", "mscale_all_dim"):
            if getattr(self, key) is not None:
                _real(getattr(self, key), key)
        if not isinstance(self.truncate, bool):
            raise TypeError(f"`truncate` must be True or False; got {self.truncate!r}")

    def _check_longrope(self) -> None:
        if self.short_factor is None or self.long_factor is None:
            raise ValueError(
                "`short_factor` and `long_factor` are required for rope_type='longrope'"
            )
        _factor_list(self.short_factor, "short_factor")
        _factor_list(self.long_factor, "long_factor")
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"`short_factor` and `long_factor` must have the same length; got "
                f"{len(self.short_factor)} and {len(self.long_factor)}"
            )
        if (
            self.attention_factor is None
            and self.factor is None
            and self.max_position_embeddings is None
        ):
            raise ValueError(
                "rope_type='longrope' needs `factor`, `attention_factor` or "
                "`max_position_embeddings` to set its attention factor"
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
        """Pairs per position stream (M-RoPE's ``mrope_section``, axial's halves), else None.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> RopeScaling("axial").sections(64), RopeScaling().sections(64)
        ((16, 16), None)
        """
        if self.rope_type == "axial":
            return axial.sections(rotary_dim)
        return self.mrope_section

    @property
    def depends_on_length(self) -> bool:
        """Whether the frequencies change with the sequence length (dynamic, longrope)."""
        return self.rope_type in ("dynamic", "longrope")

    def length_bucket(self, seq_len: int | None) -> int:
        """Key under which tables for a sequence of ``seq_len`` positions can be shared.

        Two lengths with the same bucket give the same frequencies: for ``dynamic``
        every length up to ``max_position_embeddings`` shares one bucket and each
        longer length has its own; for ``longrope`` there are two buckets (short,
        long); other methods have one.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> scaling = RopeScaling("dynamic", factor=2.0, max_position_embeddings=4096)
        >>> scaling.length_bucket(10), scaling.length_bucket(5000)
        (4096, 5000)
        """
        if self.rope_type == "dynamic":
            assert self.max_position_embeddings is not None
            return dynamic.effective_length(
                seq_len, max_position_embeddings=self.max_position_embeddings
            )
        if self.rope_type == "longrope":
            assert self.original_max_position_embeddings is not None
            return int(
                longrope.uses_long_factors(
                    seq_len, original_max_position_embeddings=self.original_max_position_embeddings
                )
            )
        return 0

    @property
    def softmax_scale(self) -> float:
        """Multiplier for the attention softmax scale (DeepSeek YaRN), else 1.0.

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> s = RopeScaling("yarn", factor=40.0, mscale=1.0, mscale_all_dim=1.0,
        ...                 original_max_position_embeddings=4096)
        >>> round(s.softmax_scale, 6)
        1.873854
        """
        if self.rope_type != "yarn":
            return 1.0
        assert self.factor is not None
        return yarn.softmax_scale(self.factor, mscale_all_dim=self.mscale_all_dim)

    def check_rotary_dim(self, rotary_dim: int) -> None:
        """Raise ``ValueError`` if per-pair lists do not fit ``rotary_dim // 2`` pairs."""
        pairs = rotary_dim // 2
        if self.rope_type in ("ntk", "dynamic") and rotary_dim <= 2:
            raise ValueError(f"rope_type={self.rope_type!r} needs rotary_dim > 2; got {rotary_dim}")
        if self.rope_type == "axial" and rotary_dim % 4:
            raise ValueError(
                "rope_type='axial' splits the pairs between two axes: `rotary_dim` must be a "
                f"multiple of 4; got {rotary_dim}"
            )
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

        Examples
        --------
        >>> from anyrope.scaling import RopeScaling
        >>> inv_freq, factor = RopeScaling().frequencies(4, 10000.0)
        >>> inv_freq.tolist(), factor
        ([1.0, 0.01], 1.0)
        """
        self.check_rotary_dim(rotary_dim)
        kind = self.rope_type
        if kind == "default":
            return default.inv_freq(rotary_dim, base), default.ATTENTION_FACTOR
        if kind == "axial":
            return axial.inv_freq(rotary_dim, base), axial.ATTENTION_FACTOR
        if kind == "llama3":
            assert self.factor is not None
            assert self.original_max_position_embeddings is not None
            assert self.low_freq_factor is not None
            assert self.high_freq_factor is not None
            freq = llama3.inv_freq(
                rotary_dim,
                base,
                factor=self.factor,
                low_freq_factor=self.low_freq_factor,
                high_freq_factor=self.high_freq_factor,
                original_max_position_embeddings=self.original_max_position_embeddings,
            )
            return freq, 1.0
        if kind == "yarn":
            return self._yarn(rotary_dim, base)
        if kind == "longrope":
            return self._longrope(rotary_dim, base, seq_len)
        assert self.factor is not None
        if kind == "linear":
            return linear.inv_freq(rotary_dim, base, factor=self.factor), 1.0
        if kind == "ntk":
            return ntk.inv_freq(rotary_dim, base, factor=self.factor), 1.0
        assert self.max_position_embeddings is not None
        freq = dynamic.inv_freq(
            rotary_dim,
            base,
            factor=self.factor,
            seq_len=seq_len,
            max_position_embeddings=self.max_position_embeddings,
        )
        return freq, 1.0

    def _yarn(self, rotary_dim: int, base: float) -> tuple[FloatArray, float]:
        assert self.factor is not None
        assert self.original_max_position_embeddings is not None
        freq = yarn.inv_freq(
            rotary_dim,
            base,
            factor=self.factor,
            original_max_position_embeddings=self.original_max_position_embeddings,
            beta_fast=self.beta_fast,
            beta_slow=self.beta_slow,
            truncate=self.truncate,
        )
        factor = yarn.attention_factor(
            self.factor,
            attention_factor=self.attention_factor,
            mscale=self.mscale,
            mscale_all_dim=self.mscale_all_dim,
        )
        return freq, factor

    def _longrope(
        self, rotary_dim: int, base: float, seq_len: int | None
    ) -> tuple[FloatArray, float]:
        assert self.short_factor is not None
        assert self.long_factor is not None
        original = self.original_max_position_embeddings
        assert original is not None
        factors = longrope.select_factors(
            self.short_factor,
            self.long_factor,
            seq_len=seq_len,
            original_max_position_embeddings=original,
        )
        extension = self.factor
        if extension is None and self.max_position_embeddings is not None:
            extension = self.max_position_embeddings / original
        factor = longrope.attention_factor(
            factor=1.0 if extension is None else extension,
            original_max_position_embeddings=original,
            attention_factor=self.attention_factor,
        )
        return longrope.inv_freq(rotary_dim, base, factors=factors), factor


def _rope_type(scaling: Mapping[str, Any]) -> str:
    new, old = scaling.get("rope_type"), scaling.get("type")
    if new is not None and old is not None and new != old:
        raise ValueError(f"`rope_type` and `type` disagree: rope_type={new!r}, type={old!r}")
    kind = new if new is not None else old
    if kind is None:
        return "default"
    if not isinstance(kind, str):
        raise TypeError(f"`rope_type` must be a string; got {kind!r}")
    kind = _ALIASES.get(kind, kind)
    if kind not in ROPE_TYPES:
        raise ValueError(
            f"`rope_type` must be one of {', '.join(map(repr, ROPE_TYPES))} (or 'mrope'); "
            f"got {kind!r}"
        )
    return kind


def parse_rope_scaling(
    scaling: Mapping[str, Any] | RopeScaling | None,
    *,
    max_position_embeddings: int | None = None,
    original_max_position_embeddings: int | None = None,
) -> RopeScaling:
    """Read a Hugging Face ``rope_scaling`` / ``rope_parameters`` dict into a :class:`RopeScaling`.

    Parameters
    ----------
    scaling : Mapping, RopeScaling or None
        The scaling dict (keys as in transformers; ``None`` values count as absent),
        an existing :class:`RopeScaling`, or ``None`` for no scaling.
    max_position_embeddings : int, optional
        The model's ``max_position_embeddings`` (``L_max``, top level of config.json).
    original_max_position_embeddings : int, optional
        A top-level ``original_max_position_embeddings`` (Phi-3 keeps it there). It must
        agree with the dict's if both are given. When neither is given, ``yarn``,
        ``longrope`` and ``llama3`` use ``max_position_embeddings`` (as transformers does).

    Returns
    -------
    RopeScaling

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
    kind = _rope_type(scaling)
    given = {key: value for key, value in scaling.items() if value is not None}
    allowed = _ANY_TYPE_KEYS | _METHOD_KEYS[kind]
    unknown = sorted(str(key) for key in given if key not in allowed)
    if unknown:
        raise ValueError(
            f"rope_type={kind!r} does not use {', '.join(f'`{key}`' for key in unknown)}; "
            f"its keys are {', '.join(sorted(allowed - {'type'}))}"
        )
    for key in _REQUIRED_KEYS[kind]:
        if key not in given:
            raise ValueError(f"`{key}` is required for rope_type={kind!r}")
    if scaling.get("type") == "mrope" and "mrope_section" not in given:
        raise ValueError("`mrope_section` is required for type='mrope'")
    fields: dict[str, Any] = {"rope_type": kind, "max_position_embeddings": max_position_embeddings}
    for key in (
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
    ):
        if key in given:
            fields[key] = _real(given[key], key)
    if "truncate" in given:
        fields["truncate"] = given["truncate"]
    for key in ("short_factor", "long_factor"):
        if key in given:
            fields[key] = _factor_list(given[key], key)
    if "mrope_section" in given:
        section = given["mrope_section"]
        if isinstance(section, (str, bytes)) or not isinstance(section, Sequence):
            raise TypeError(f"`mrope_section` must be a list of integers; got {section!r}")
        fields["mrope_section"] = tuple(
            _positive_int(size, f"mrope_section[{index}]") for index, size in enumerate(section)
        )
    inner = given.get("original_max_position_embeddings")
    if inner is not None:
        inner = _positive_int(inner, "original_max_position_embeddings")
    fields["original_max_position_embeddings"] = _original_length(
        kind, inner, original_max_position_embeddings, max_position_embeddings
    )
    return RopeScaling(**fields)


def _original_length(
    kind: str, inner: int | None, outer: int | None, max_position_embeddings: int | None
) -> int | None:
    if inner is not None and outer is not None and inner != outer:
        raise ValueError(
            "`original_max_position_embeddings` disagrees between the scaling dict "
            f"({inner}) and the model config ({outer})"
        )
    original = inner if inner is not None else outer
    if original is None and kind in _USES_ORIGINAL:
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
