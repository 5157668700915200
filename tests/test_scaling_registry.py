"""The registry of scaling methods: config.py knows each method only through it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from anyrope.scaling import ROPE_TYPES, RopeScaling, default, parse_rope_scaling
from anyrope.scaling._registry import Method, ScalingFields, get, names, register, unregister
from anyrope.scaling._types import FloatArray


def _toy_frequencies(
    scaling: ScalingFields, rotary_dim: int, base: float, seq_len: int | None
) -> tuple[FloatArray, float]:
    assert scaling.factor is not None
    stretch = scaling.factor * (1 + _toy_bucket(scaling, seq_len))
    return default.inv_freq(rotary_dim, base) / stretch, 0.5


def _toy_bucket(scaling: ScalingFields, seq_len: int | None) -> int:
    return 0 if seq_len is None else seq_len // 1000


def _toy_validate(scaling: ScalingFields) -> None:
    if scaling.factor is not None and scaling.factor > 10.0:
        raise ValueError("toy factor must be <= 10")


TOY = Method(
    "toy",
    _toy_frequencies,
    keys=frozenset({"factor", "attention_factor"}),
    required=("factor",),
    validate=_toy_validate,
    length_bucket=_toy_bucket,
    softmax_scale=lambda scaling: 2.0,
)


@pytest.fixture
def toy() -> Iterator[Method]:
    register(TOY)
    yield TOY
    unregister("toy")


def test_every_rope_type_is_registered_in_order() -> None:
    assert names() == ROPE_TYPES
    for name in ROPE_TYPES:
        assert get(name).rope_type == name


@pytest.mark.usefixtures("toy")
def test_a_registered_method_parses_without_editing_config() -> None:
    scaling = parse_rope_scaling({"rope_type": "toy", "factor": 2.0, "attention_factor": 1.5})
    assert scaling == RopeScaling("toy", factor=2.0, attention_factor=1.5)
    with pytest.raises(ValueError, match=r"`factor` is required for rope_type='toy'"):
        parse_rope_scaling({"rope_type": "toy"})
    with pytest.raises(ValueError, match=r"its keys are attention_factor, factor, "):
        parse_rope_scaling({"rope_type": "toy", "factor": 2.0, "beta_fast": 4.0})
    with pytest.raises(ValueError, match=r"toy factor must be <= 10"):
        RopeScaling("toy", factor=20.0)
    with pytest.raises(ValueError, match=r"`factor` must be >= 1 for rope_type='toy'"):
        RopeScaling("toy", factor=0.5)


@pytest.mark.usefixtures("toy")
def test_a_registered_method_computes_through_its_hooks() -> None:
    scaling = RopeScaling("toy", factor=2.0)
    unscaled = default.inv_freq(8, 10000.0)
    inv_freq, attention_factor = scaling.frequencies(8, 10000.0)
    np.testing.assert_array_equal(inv_freq, unscaled / 2.0)
    assert attention_factor == 0.5
    longer, _ = scaling.frequencies(8, 10000.0, seq_len=2500)
    np.testing.assert_array_equal(longer, unscaled / 6.0)
    assert scaling.depends_on_length
    assert scaling.length_bucket(2500) == 2
    assert scaling.softmax_scale == 2.0
    assert scaling.sections(8) is None


def test_the_registry_is_consulted_at_call_time() -> None:
    with pytest.raises(ValueError, match=r"got 'toy'"):
        RopeScaling("toy", factor=2.0)
    register(TOY)
    try:
        assert "toy" in names()
        assert RopeScaling("toy", factor=2.0).rope_type == "toy"
        with pytest.raises(ValueError, match=r"`rope_type` must be one of .*'proportional', 'toy'"):
            parse_rope_scaling({"rope_type": "nope"})
    finally:
        assert unregister("toy") is TOY
    assert names() == ROPE_TYPES
    with pytest.raises(ValueError, match=r"`rope_type` must be one of .*; got 'toy'"):
        parse_rope_scaling({"rope_type": "toy", "factor": 2.0})


def test_a_method_with_sections_takes_no_mrope_section() -> None:
    axial_like = Method(
        "toy", _toy_frequencies, sections=lambda scaling, rotary_dim: (rotary_dim // 2,)
    )
    register(axial_like)
    try:
        assert RopeScaling("toy").sections(12) == (6,)
        with pytest.raises(ValueError, match=r"`mrope_section` does not apply to rope_type='toy'"):
            RopeScaling("toy", mrope_section=(2, 4))
    finally:
        unregister("toy")


def test_duplicate_registration_is_an_error() -> None:
    linear = get("linear")
    with pytest.raises(ValueError, match=r"rope_type='linear' is already registered"):
        register(Method("linear", _toy_frequencies))
    assert get("linear") is linear
    assert names() == ROPE_TYPES


def test_required_keys_must_be_accepted_keys() -> None:
    with pytest.raises(ValueError, match=r"requires 'factor' but does not list it in `keys`"):
        Method("toy", _toy_frequencies, required=("factor",))


def test_unknown_names() -> None:
    with pytest.raises(KeyError):
        get("toy")
    with pytest.raises(KeyError):
        unregister("toy")
