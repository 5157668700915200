"""Context-extension scaling of RoPE frequencies: the Hugging Face ``rope_type`` family.

Everything here is float64 NumPy on the host and never touches an accelerator: one
small module per method, each a record class of its keys and its formulas
(:mod:`~anyrope.scaling.default`, :mod:`~anyrope.scaling.linear`,
:mod:`~anyrope.scaling.ntk`, :mod:`~anyrope.scaling.dynamic`, :mod:`~anyrope.scaling.yarn`,
:mod:`~anyrope.scaling.longrope`, :mod:`~anyrope.scaling.llama3`,
:mod:`~anyrope.scaling.proportional` (Gemma 4), and :mod:`~anyrope.scaling.axial` for
image patches and video grids), :class:`RopeScaling`, their base, read from a
``rope_scaling`` dict by :func:`parse_rope_scaling`, and :func:`from_hf_config` reading a
whole model config.

The formulas follow transformers 5.23.0 (``modeling_rope_utils.py``); the optional
``tests-hf`` nox session checks every real config in ``tests/configs`` against it.
"""

from __future__ import annotations

import importlib
import pkgutil

from .config import RopeScaling, names, parse_rope_scaling, register
from .hf import HFRopeConfig, from_hf_config

# Importing a method's module registers it: every public module here is imported, so a
# new method is one new module.
for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

ROPE_TYPES = names()
"""Every ``rope_type`` anyrope computes, sorted (``"mrope"`` is read as ``"default"``
with sections); a method registered later is accepted everywhere but not listed here."""

__all__ = [
    "ROPE_TYPES",
    "HFRopeConfig",
    "RopeScaling",
    "from_hf_config",
    "parse_rope_scaling",
    "register",
]
