"""Parsing and validation of Hugging Face ``rope_scaling`` / ``rope_parameters`` dicts."""

from __future__ import annotations

import dataclasses
import re

import pytest

from anyrope.scaling import ROPE_TYPES, RopeScaling, parse_rope_scaling

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def test_none_is_default() -> None:
    scaling = parse_rope_scaling(None, max_position_embeddings=4096)
    assert scaling == RopeScaling(max_position_embeddings=4096)
    assert scaling.rope_type == "default"


@pytest.mark.parametrize("key", ["rope_type", "type"])
def test_old_and_new_type_key(key: str) -> None:
    scaling = parse_rope_scaling({key: "linear", "factor": 2.0})
    assert scaling.rope_type == "linear"
    assert scaling.factor == 2.0


def test_both_type_keys_must_agree() -> None:
    assert (
        parse_rope_scaling({"type": "linear", "rope_type": "linear", "factor": 2.0}).factor == 2.0
    )
    with pytest.raises(ValueError, match=r"`rope_type`='dynamic' and `type`='linear' disagree"):
        parse_rope_scaling({"type": "linear", "rope_type": "dynamic", "factor": 2.0})


def test_missing_type_means_default() -> None:
    assert parse_rope_scaling({"rope_theta": 1e6}).rope_theta == 1e6


def test_mrope_alias() -> None:
    scaling = parse_rope_scaling({"type": "mrope", "mrope_section": [16, 24, 24]})
    assert scaling.rope_type == "default"
    assert scaling.mrope_section == (16, 24, 24)
    with pytest.raises(ValueError, match=r"`mrope_section` is required"):
        parse_rope_scaling({"type": "mrope"})


def test_none_values_count_as_absent() -> None:
    scaling = parse_rope_scaling(
        {"rope_type": "yarn", "factor": 4.0, "beta_fast": None, "attention_factor": None},
        max_position_embeddings=4096,
    )
    assert scaling.beta_fast == 32.0
    assert scaling.attention_factor is None


def test_original_length_defaults_to_max_positions_like_transformers() -> None:
    scaling = parse_rope_scaling({"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=4096)
    assert scaling.original_max_position_embeddings == 4096


def test_top_level_original_length() -> None:
    scaling = parse_rope_scaling(
        {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
    )
    assert scaling.original_max_position_embeddings == 4096


def test_parse_keeps_a_rope_scaling_and_fills_lengths() -> None:
    scaling = RopeScaling("linear", factor=2.0)
    assert parse_rope_scaling(scaling) is scaling
    filled = parse_rope_scaling(scaling, max_position_embeddings=100)
    assert filled.max_position_embeddings == 100
    with pytest.raises(ValueError, match=r"`max_position_embeddings` disagrees"):
        parse_rope_scaling(filled, max_position_embeddings=200)


def test_frozen() -> None:
    scaling = RopeScaling("linear", factor=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scaling.factor = 3.0  # type: ignore[misc]
    assert hash(scaling) == hash(RopeScaling("linear", factor=2.0))


@pytest.mark.parametrize(
    ("scaling", "kwargs", "error", "message"),
    [
        ({"rope_type": "su"}, {}, ValueError, "`rope_type` must be one of"),
        ({"rope_type": "fope"}, {}, ValueError, "got 'fope'"),
        ({"rope_type": 3}, {}, TypeError, "`rope_type` must be a string"),
        ({"rope_type": "linear"}, {}, ValueError, "`factor` is required for rope_type='linear'"),
        ({"rope_type": "linear", "factor": 0.5}, {}, ValueError, "`factor` must be >= 1"),
        ({"rope_type": "linear", "factor": "2"}, {}, TypeError, "`factor` must be a real number"),
        (
            {"rope_type": "linear", "factor": float("inf")},
            {},
            ValueError,
            "`factor` must be finite",
        ),
        ({"rope_type": "linear", "factor": True}, {}, TypeError, "`factor` must be a real number"),
        (
            {"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0},
            {},
            ValueError,
            "rope_type='linear' does not use `low_freq_factor`",
        ),
        (
            {"rope_type": "dynamic", "factor": 2.0},
            {},
            ValueError,
            "`max_position_embeddings` is required",
        ),
        ({**LLAMA3, "low_freq_factor": None}, {}, ValueError, "`low_freq_factor` is required"),
        ({**LLAMA3, "high_freq_factor": 1.0}, {}, ValueError, "`high_freq_factor` must be greater"),
        (
            {k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"},
            {},
            ValueError,
            "`original_max_position_embeddings` \\(or `max_position_embeddings`\\) is required",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "beta_fast": 1, "beta_slow": 32},
            {"max_position_embeddings": 4096},
            ValueError,
            "`beta_fast` must be >= `beta_slow`",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "beta_slow": 0},
            {"max_position_embeddings": 4096},
            ValueError,
            "`beta_fast` must be >= `beta_slow` > 0",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "attention_factor": -1.0},
            {"max_position_embeddings": 4096},
            ValueError,
            "`attention_factor` must be positive",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "truncate": "no"},
            {"max_position_embeddings": 4096},
            TypeError,
            "`truncate` must be true or false",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096.5},
            {},
            TypeError,
            "`original_max_position_embeddings` must be an integer",
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
            {"original_max_position_embeddings": 2048},
            ValueError,
            "`original_max_position_embeddings` disagrees",
        ),
        (
            {"rope_type": "longrope", "short_factor": [1.0]},
            {"max_position_embeddings": 4096},
            ValueError,
            "`long_factor` is required",
        ),
        (
            {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0, 2.0]},
            {"max_position_embeddings": 4096},
            ValueError,
            "`short_factor` and `long_factor` must have the same length",
        ),
        (
            {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [0.0]},
            {"max_position_embeddings": 4096},
            ValueError,
            "`long_factor\\[0\\]` must be positive; got 0.0",
        ),
        (
            {"rope_type": "longrope", "short_factor": "1", "long_factor": [1.0]},
            {"max_position_embeddings": 4096},
            TypeError,
            "`short_factor` must be a list of numbers",
        ),
        (
            {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]},
            {"original_max_position_embeddings": 4096},
            ValueError,
            "needs `factor`, `attention_factor` or `max_position_embeddings`",
        ),
        ({"mrope_section": [16, -1]}, {}, ValueError, "`mrope_section\\[1\\]` must be a positive"),
        ({"rope_theta": 1.0}, {}, ValueError, "`base` must be a finite number greater than 1"),
        ({"partial_rotary_factor": 1.5}, {}, ValueError, "`partial_rotary_factor` must be in"),
    ],
)
def test_errors_name_the_key(
    scaling: dict[str, object], kwargs: dict[str, int], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        parse_rope_scaling(scaling, **kwargs)


def test_not_a_mapping() -> None:
    with pytest.raises(TypeError, match=r"`scaling` must be a dict"):
        parse_rope_scaling([("rope_type", "linear")])  # type: ignore[arg-type]


def test_unknown_key_message_lists_the_accepted_keys() -> None:
    with pytest.raises(ValueError, match=re.escape("its keys are factor, ")):
        parse_rope_scaling({"rope_type": "linear", "factor": 2.0, "fctor": 2.0})


@pytest.mark.parametrize(
    ("scaling", "rotary_dim", "message"),
    [
        (
            RopeScaling(
                "longrope",
                short_factor=(1.0,) * 47,
                long_factor=(1.0,) * 47,
                original_max_position_embeddings=4096,
                factor=32.0,
            ),
            96,
            "`short_factor` must have rotary_dim // 2 = 48 entries; got 47",
        ),
        (
            RopeScaling(mrope_section=(16, 24, 23)),
            128,
            "`mrope_section` must sum to rotary_dim // 2 = 64",
        ),
        (RopeScaling("ntk", factor=2.0), 2, "needs rotary_dim > 2"),
    ],
)
def test_rotary_dim_checks(scaling: RopeScaling, rotary_dim: int, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scaling.frequencies(rotary_dim, 10000.0)


def test_every_type_is_listed() -> None:
    assert set(ROPE_TYPES) == {
        "default",
        "linear",
        "ntk",
        "dynamic",
        "yarn",
        "longrope",
        "llama3",
        "axial",
        "proportional",
    }


def test_length_buckets() -> None:
    assert RopeScaling("linear", factor=2.0).length_bucket(10**6) == 0
    dynamic = RopeScaling("dynamic", factor=2.0, max_position_embeddings=100)
    assert {dynamic.length_bucket(n) for n in (None, 1, 50, 100)} == {100}
    assert dynamic.length_bucket(101) == 101
    assert dynamic.depends_on_length
    assert not RopeScaling(
        "yarn", factor=2.0, original_max_position_embeddings=10
    ).depends_on_length
