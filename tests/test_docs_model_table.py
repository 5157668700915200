"""The "Your model" table of docs/layouts-and-positions.rst agrees with the published
configs in tests/configs/: each row marked * there gives the call that
``RoPE.from_hf_config`` builds from that model's ``config.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import anyrope

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "layouts-and-positions.rst"

# Table row (its model cell) -> the config in tests/configs/ it was checked against.
ROW_CONFIGS = {
    "Llama 3.1 8B* / 3.3 70B (HF)": "llama-3.1-8b",
    "Code Llama 7B* (HF)": "codellama-7b",
    "Mistral 7B v0.2* (HF)": "mistral-7b-v0.2",
    "Qwen2.5 7B Instruct* (HF)": "qwen2.5-7b-instruct-yarn",
    "Phi-3 mini 128k* (HF)": "phi-3-mini-128k-instruct",
    "DeepSeek-V3*": "deepseek-v3",
    "GPT-NeoX-20B*": "gpt-neox-20b",
    "Gemma 2 (HF)": "gemma-2-9b",  # "(2B, 9B*)": the first call of the row
}


def _table_rows() -> dict[str, str]:
    """Model cell -> the rest of the row's text, from the list-table after "Your model"."""
    text = PAGE.read_text()
    table = text[text.index("Your model: the call to make") :]
    table = table[table.index(".. list-table::") : table.index("\nRather than copying")]
    rows: dict[str, str] = {}
    for chunk in table.split("\n   * - ")[2:]:  # after the directive and the header
        model, _, rest = chunk.partition("\n")
        rows[model.strip()] = " ".join(rest.split())
    return rows


def test_every_row_marked_with_a_config_is_checked():
    starred = {model for model, rest in _table_rows().items() if "*" in model + rest}
    assert starred == set(ROW_CONFIGS)


@pytest.mark.parametrize("model", sorted(ROW_CONFIGS))
def test_row_gives_the_call_of_its_config(model):
    row = _table_rows()[model]
    config = json.loads((ROOT / "tests" / "configs" / f"{ROW_CONFIGS[model]}.json").read_text())
    from_config = anyrope.RoPE.from_hf_config(config)
    call = re.search(r"``(RoPE\([^`]*\))``", row).group(1)
    documented = eval(call, {"RoPE": anyrope.RoPE})  # the page's own call, as written
    for name in ("head_dim", "rotary_dim", "base", "interleaved"):
        assert getattr(documented, name) == getattr(from_config, name), (model, name)
    if from_config.scaling.rope_type != "default":
        assert from_config.scaling.rope_type in row or "YaRN" in row, model
    factor = from_config.scaling.factor
    if factor not in (None, 1.0):
        assert f"factor {factor:g}" in row, (model, factor)
