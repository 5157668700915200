"""The registry of scaling methods: a record class per method, read with no per-key code."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Iterator

import numpy as np
import pytest

from anyrope.scaling import ROPE_TYPES, RopeScaling, default, parse_rope_scaling, register
from anyrope.scaling._checks import Factor
from anyrope.scaling._types import FloatArray
from anyrope.scaling.config import get, names, unregister


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class Toy(RopeScaling):
    """A method with a key no built-in method takes (``stretch``) and every hook."""

    rope_type = "toy"
    depends_on_length = True
    factor: Factor
    stretch: float = 1.0

    def _validate(self) -> None:
        if self.factor > 10.0:
            raise ValueError("toy factor must be <= 10")

    def _frequencies(
        self, rotary_dim: int, base: float, seq_len: int | None
    ) -> tuple[FloatArray, float]:
        scale = self.factor * self.stretch * (1 + self.length_bucket(seq_len))
        return default.inv_freq(rotary_dim, base) / scale, 0.5

    def length_bucket(self, seq_len: int | None) -> int:
        return 0 if seq_len is None else seq_len // 1000

    @property
    def softmax_scale(self) -> float:
        return 2.0


@pytest.fixture
def toy() -> Iterator[type[Toy]]:
    register(Toy)
    yield Toy
    unregister("toy")


def test_every_rope_type_is_registered() -> None:
    assert names() == ROPE_TYPES == tuple(sorted(ROPE_TYPES))
    for name in ROPE_TYPES:
        assert get(name).rope_type == name
        assert issubclass(get(name), RopeScaling)


@pytest.mark.usefixtures("toy")
def test_a_registered_method_is_read_from_its_fields() -> None:
    scaling = parse_rope_scaling({"rope_type": "toy", "factor": 2, "stretch": 3})
    assert scaling == RopeScaling("toy", factor=2.0, stretch=3.0) == Toy(factor=2.0, stretch=3.0)
    assert (type(scaling.factor), type(scaling.stretch)) == (float, float)
    with pytest.raises(ValueError, match=r"`factor` is required for rope_type='toy'"):
        parse_rope_scaling({"rope_type": "toy"})
    with pytest.raises(ValueError, match=r"'toy' does not use `beta_fast`; its keys are factor, "):
        parse_rope_scaling({"rope_type": "toy", "factor": 2.0, "beta_fast": 4.0})
    with pytest.raises(TypeError, match=r"`stretch` must be a real number"):
        RopeScaling("toy", factor=2.0, stretch="3")
    with pytest.raises(ValueError, match=r"toy factor must be <= 10"):
        RopeScaling("toy", factor=20.0)
    with pytest.raises(ValueError, match=r"`factor` must be >= 1"):
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
    assert RopeScaling("linear", factor=2.0).stretch is None


def test_the_registry_is_consulted_at_call_time() -> None:
    with pytest.raises(ValueError, match=r"got 'toy'"):
        RopeScaling("toy", factor=2.0)
    register(Toy)
    try:
        assert "toy" in names()
        assert RopeScaling("toy", factor=2.0).rope_type == "toy"
        with pytest.raises(ValueError, match=r"`rope_type` must be one of .*'toy', 'yarn'"):
            parse_rope_scaling({"rope_type": "nope"})
    finally:
        assert unregister("toy") is Toy
    assert names() == ROPE_TYPES
    with pytest.raises(ValueError, match=r"`rope_type` must be one of .*; got 'toy'"):
        parse_rope_scaling({"rope_type": "toy", "factor": 2.0})


def test_a_key_of_another_method_is_refused() -> None:
    with pytest.raises(ValueError, match=r"rope_type='linear' does not use `low_freq_factor`"):
        RopeScaling("linear", factor=2.0, low_freq_factor=1.0)
    with pytest.raises(ValueError, match=r"its keys are factor, max_position_embeddings, "):
        RopeScaling("linear", factor=2.0, fctor=2.0)


def test_reading_a_key_no_method_takes_is_an_attribute_error() -> None:
    assert RopeScaling().factor is None
    with pytest.raises(AttributeError, match=r"'Default' object has no attribute 'fctor'"):
        RopeScaling().fctor  # noqa: B018


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "default", "mrope_section": [1, 1], "mrope_interleaved": True},
        {"rope_type": "linear", "factor": 2},
        {"rope_type": "ntk", "factor": 2},
        {"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 10},
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 10},
        {"rope_type": "longrope", "short_factor": [1], "long_factor": [2], "factor": 2},
        {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4},
        {"rope_type": "axial", "axial_sections": [1, 2]},
        {"rope_type": "proportional", "partial_rotary_factor": 0.5},
    ],
    ids=lambda scaling: scaling["rope_type"],
)
def test_records_pickle_copy_compare_and_hash(scaling: dict[str, object]) -> None:
    record = parse_rope_scaling(scaling, max_position_embeddings=10)
    assert {get(record.rope_type)} == {type(record)}
    for twin in (pickle.loads(pickle.dumps(record)), copy.deepcopy(record)):
        assert twin == record
        assert hash(twin) == hash(record)
        assert type(twin) is type(record)
    assert parse_rope_scaling(dict(scaling), max_position_embeddings=10) == record
    assert record != dataclasses.replace(record, max_position_embeddings=11)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.max_position_embeddings = 1  # type: ignore[misc]


def test_duplicate_registration_is_an_error() -> None:
    linear = get("linear")
    with pytest.raises(ValueError, match=r"rope_type='linear' is already registered"):
        register(linear)
    assert get("linear") is linear
    assert names() == ROPE_TYPES


def test_a_field_type_without_a_check_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
    class Odd(RopeScaling):
        rope_type = "odd"
        name: str = "x"

    with pytest.raises(TypeError, match=r"field `name` of Odd has type <class 'str'>"):
        register(Odd)
    assert "odd" not in names()


def test_unknown_names() -> None:
    with pytest.raises(KeyError):
        get("toy")
    with pytest.raises(KeyError):
        unregister("toy")
