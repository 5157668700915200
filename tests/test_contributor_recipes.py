"""The recipes of docs/architecture.rst, followed as written in a copy of the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import anyrope

ARCHITECTURE = Path(__file__).parents[1] / "docs" / "architecture.rst"


def test_add_a_scaling_method(tmp_path: Path) -> None:
    """The recipe "Adding a scaling method": the page's module, dropped into a copy of the package
    and nothing else edited, is read from a dict and from a model config, takes its new
    key, and refuses a key it does not take."""
    page = ARCHITECTURE.read_text()
    recipe = page[page.index("**Adding a scaling method**") :]
    block = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", recipe)
    assert block is not None, "the recipe has no code block"
    package = tmp_path / "anyrope"
    shutil.copytree(
        Path(anyrope.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    (package / "scaling" / "stretch.py").write_text(textwrap.dedent(block.group(1)))
    check = textwrap.dedent(
        """
        import numpy as np
        import pytest
        import anyrope
        from anyrope.scaling import ROPE_TYPES, default

        assert anyrope.__file__.startswith(sys.argv[1]), anyrope.__file__
        assert "stretch" in ROPE_TYPES
        unscaled = default.inv_freq(64, 10000.0)
        rope = anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0, "alpha": 1.5})
        assert type(rope.scaling).__name__ == "Stretch"
        np.testing.assert_array_equal(rope.inv_freq, unscaled / 3.0)
        config = {"head_dim": 64, "max_position_embeddings": 4096,
                  "rope_scaling": {"type": "stretch", "factor": 2, "alpha": 4}}
        hf = anyrope.RoPE.from_hf_config(config)
        assert (hf.scaling.alpha, hf.max_position_embeddings) == (4.0, 4096)
        np.testing.assert_array_equal(hf.inv_freq, unscaled / 8.0)
        default_alpha = anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0})
        np.testing.assert_array_equal(default_alpha.inv_freq, unscaled / 2.0)
        with pytest.raises(ValueError, match=r"rope_type='stretch' does not use `beta`; "
                           r"its keys are alpha, factor, "):
            anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0, "beta": 1.0})
        with pytest.raises(ValueError, match=r"`factor` is required for rope_type='stretch'"):
            anyrope.RoPE(64, scaling={"rope_type": "stretch", "alpha": 2.0})
        with pytest.raises(TypeError, match=r"`alpha` must be a real number"):
            anyrope.RoPE(64, scaling={"rope_type": "stretch", "factor": 2.0, "alpha": "2"})
        print("recipe ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", "import sys\n" + check, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
        check=False,
    )
    assert result.stdout.strip() == "recipe ok", result.stderr
