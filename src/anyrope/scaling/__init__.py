"""Context-extension scaling of RoPE frequencies: the Hugging Face ``rope_type`` family.

Everything here is float64 NumPy on the host and never touches an accelerator: one
small module per method (:mod:`~anyrope.scaling.default`, :mod:`~anyrope.scaling.linear`,
:mod:`~anyrope.scaling.ntk`, :mod:`~anyrope.scaling.dynamic`, :mod:`~anyrope.scaling.yarn`,
:mod:`~anyrope.scaling.longrope`, :mod:`~anyrope.scaling.llama3`,
:mod:`~anyrope.scaling.proportional` (Gemma 4), and :mod:`~anyrope.scaling.axial` for
image patches and video grids), a validated
:class:`RopeScaling` parsed from a ``rope_scaling`` dict, and :func:`from_hf_config`
reading a whole model config.

The formulas follow transformers 5.23.0 (``modeling_rope_utils.py``); the optional
``tests-hf`` nox session checks every real config in ``tests/configs`` against it.
"""

from __future__ import annotations

# config imports the method modules in registration order (the order of ROPE_TYPES), so it
# must run before the alphabetical import below.
from .config import ROPE_TYPES, RopeScaling, parse_rope_scaling

# isort: split
from . import axial, default, dynamic, linear, llama3, longrope, ntk, proportional, yarn
from .hf import HFRopeConfig, from_hf_config

__all__ = [
    "ROPE_TYPES",
    "HFRopeConfig",
    "RopeScaling",
    "axial",
    "default",
    "dynamic",
    "from_hf_config",
    "linear",
    "llama3",
    "longrope",
    "ntk",
    "parse_rope_scaling",
    "proportional",
    "yarn",
]
