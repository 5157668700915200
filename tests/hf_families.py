"""Drive each transformers family's own rotary class and apply function, and anyrope.

For every modeling file of the installed transformers that defines a ``*RotaryEmbedding``
class, :func:`drive` builds the family's default config, computes its ``cos``/``sin``
with the family's rotary module and rotates q and k with the family's
``apply_rotary_pos_emb``, then rotates the same q and k with
``anyrope.RoPE.from_hf_config(config)``. The outcome is one of:

- ``match``: the two agree (to float32 rounding of the family's float32 angles);
- ``mismatch``: they differ, with a diagnosis (pairing, direction, width) in ``detail``;
- ``anyrope error``: anyrope refused the config with a message (``detail``);
- ``not driven``: the family's code could not be driven generically (``detail`` says
  why: no default config, a rotary class or apply function of another shape, ...).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any

import numpy as np

import anyrope
from anyrope.scaling.hf import layer_types

PINNED_TRANSFORMERS = "5.23.0"
"""The transformers release the ``tests-hf`` nox session installs (noxfile.py's pin)."""


def unpinned_reason(found: str) -> str | None:
    """Why a test pinned to :data:`PINNED_TRANSFORMERS` skips with transformers ``found``
    installed (both versions said), or ``None`` when ``found`` is the pinned one."""
    if found == PINNED_TRANSFORMERS:
        return None
    return (
        f"pinned to transformers {PINNED_TRANSFORMERS} (nox -s tests-hf installs it); "
        f"found transformers {found}"
    )


SEQ = 48
POSITIONS_FROM = 1000
"""Positions POSITIONS_FROM .. + SEQ: far enough that a wrong frequency shows."""


@dataclass(frozen=True)
class Outcome:
    family: str
    kind: str
    detail: str = ""
    model_type: str = ""


def rotary_families() -> list[str]:
    """The ``transformers.models`` packages whose modeling files define a rotary class."""
    import transformers.models

    found = []
    for info in pkgutil.iter_modules(transformers.models.__path__):
        package = f"transformers.models.{info.name}"
        spec = importlib.util.find_spec(f"{package}.modeling_{info.name}")
        if spec is None or spec.origin is None:
            continue
        with open(spec.origin, encoding="utf-8") as source:
            if "RotaryEmbedding(nn.Module)" in source.read():
                found.append(info.name)
    return found


def _config(family: str) -> Any:
    """The family's default top-level config."""
    import transformers

    module = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, transformers.PreTrainedConfig)
        and c.__module__ == module.__name__
        and getattr(c, "model_type", "")
    ]
    if not classes:
        raise LookupError("no config class")
    return next((c for c in classes if c.model_type == family), classes[0])()


def _rotary_and_config(module: Any, top: Any) -> tuple[Any, Any]:
    """The family's main rotary class and the (sub-)config it is built from: the text
    model's, else a rotary class built from a sub-config (an audio or video encoder)."""
    classes = [
        c
        for name, c in inspect.getmembers(module, inspect.isclass)
        if name.endswith("RotaryEmbedding") and c.__module__ == module.__name__
    ]
    # Qwen2.5-Omni's DiT (its speech decoder's transformer) has a rotary class of its own.
    towers = ("Vision", "Audio", "Video", "DiT")
    text = [c for c in classes if not any(w in c.__name__ for w in towers)]
    if text:
        return text[0], top.get_text_config()
    for rotary in classes:
        wanted = inspect.signature(rotary.__init__).parameters.get("config")
        annotation = getattr(wanted, "annotation", None)
        name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        for key in getattr(top, "sub_configs", {}):
            sub = getattr(top, key, None)
            if sub is not None and type(sub).__name__ == name:
                return rotary, sub
    raise LookupError("no text rotary class, nor one built from a sub-config")


DEINTERLEAVED = "the family's output holds the rotated pairs de-interleaved"


def _apply_function(module: Any, config: Any) -> tuple[Any, bool]:
    """The function the family's attention applies, and whether it is DeepSeek's
    ``apply_rotary_pos_emb_interleave`` (chosen by ``config.rope_interleave``, or the
    only one some families have)."""
    interleave = getattr(module, "apply_rotary_pos_emb_interleave", None)
    apply = getattr(module, "apply_rotary_pos_emb", None)
    source = inspect.getsource(module)
    # Some families' attention calls it always (DeepSeek-V3.2's main attention; its
    # indexer uses the half-split function), others by config.rope_interleave.
    always = "rope_interleave" not in source and "= apply_rotary_pos_emb_interleave(" in source
    if interleave is not None and (
        apply is None or always or getattr(config, "rope_interleave", False)
    ):
        return interleave, True
    if apply is None:
        raise LookupError("no apply_rotary_pos_emb")
    parameters = list(inspect.signature(apply).parameters)
    if parameters[:3] == ["x", "cos", "sin"]:
        # One tensor at a time (Gemma 3n and others): q and k alike.
        return (lambda q, k, cos, sin: (apply(q, cos, sin), apply(k, cos, sin))), False
    if parameters[:4] != ["q", "k", "cos", "sin"]:
        raise LookupError(f"apply_rotary_pos_emb{inspect.signature(apply)}")
    return apply, False


def _hf_rotation(  # noqa: PLR0917 - the family's code, its config and the inputs
    module: Any,
    rotary_class: Any,
    config: Any,
    q: Any,
    k: Any,
    positions: Any,
    layer_type: str | None,
) -> tuple[Any, Any, bool]:
    """The family's q and k rotated, and whether its output is de-interleaved."""
    import torch

    rotary = rotary_class(config=config)
    x = torch.zeros(1, positions.shape[-1], 8)
    extra = () if layer_type is None else (layer_type,)
    tables = rotary(x, positions, *extra)
    if isinstance(tables, torch.Tensor) and tables.is_complex():
        # Meta's complex form (Llama 4, DeepSeek-V2): q and k as (batch, seq, heads, dim).
        q_out, k_out = module.apply_rotary_emb(q.transpose(1, 2), k.transpose(1, 2), tables)
        return q_out.transpose(1, 2), k_out.transpose(1, 2), False
    cos, sin = tables
    apply, deinterleaved = _apply_function(module, config)
    try:
        q_out, k_out = apply(q, k, cos, sin)
    except RuntimeError:
        # Partial rotary (Phi, Persimmon, StableLM): the attention rotates the leading
        # features and passes the rest through, as here.
        width = cos.shape[-1]
        q_rot, k_rot = apply(q[..., :width], k[..., :width], cos, sin)
        q_out = torch.cat((q_rot, q[..., width:]), dim=-1)
        k_out = torch.cat((k_rot, k[..., width:]), dim=-1)
    return q_out, k_out, deinterleaved


def _deinterleave(x: Any, rotary_dim: int) -> Any:
    """The rotated features of ``x`` as DeepSeek's function leaves them: the first element
    of every pair, then the second (the rest unchanged)."""
    import torch

    rot = x[..., :rotary_dim]
    pairs = rot.reshape(*rot.shape[:-1], rotary_dim // 2, 2).transpose(-1, -2)
    return torch.cat((pairs.reshape(rot.shape), x[..., rotary_dim:]), dim=-1)


def drive(family: str) -> list[Outcome]:
    """Rotate with the family's own code and with anyrope; say how they compare (one
    outcome per layer type for configs with settings per layer type)."""
    try:
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        rotary_class, config = _rotary_and_config(module, _config(family))
    except Exception as error:
        return [Outcome(family, "not driven", f"{type(error).__name__}: {error}")]
    nested = layer_types(config)
    if nested is None:
        return [_drive_one(family, module, rotary_class, config, None)]
    scaling = config.rope_parameters
    return [
        _drive_one(f"{family}[{name}]", module, rotary_class, config, name)
        for name in nested
        if scaling[name] is not None
    ]


def _drive_one(
    label: str, module: Any, rotary_class: Any, config: Any, layer_type: str | None
) -> Outcome:
    import torch

    model_type = getattr(config, "model_type", "")
    try:
        rope = anyrope.RoPE.from_hf_config(config, layer_type=layer_type)
    except (TypeError, ValueError) as error:
        return Outcome(label, "anyrope error", str(error), model_type)
    except Exception as error:
        return Outcome(label, "not driven", f"{type(error).__name__}: {error}", model_type)
    if rope.axial:
        reason = "a vision tower's 2-D axial RoPE: positions are patch rows and columns"
        return Outcome(label, "not driven", reason, model_type)
    heads = 2
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, SEQ, rope.head_dim, generator=generator, dtype=torch.float32)
    k = torch.randn(1, heads, SEQ, rope.head_dim, generator=generator, dtype=torch.float32)
    positions = torch.arange(POSITIONS_FROM, POSITIONS_FROM + SEQ)[None]
    if rope.scaling.mrope_section is not None:
        # M-RoPE: a different position in each stream (temporal, height, width), so
        # that the sections' layout shows.
        streams = len(rope.scaling.mrope_section)
        positions = torch.stack([positions // (1 + stream) for stream in range(streams)])
    try:
        hf_q, hf_k, deinterleaved = _hf_rotation(
            module, rotary_class, config, q, k, positions, layer_type
        )
    except Exception as error:
        return Outcome(
            label, "not driven", f"{type(error).__name__}: {str(error)[:200]}", model_type
        )
    ours_q, ours_k = rope(q, k, positions, layout="bhsd", impl="array_api")
    if deinterleaved:
        # The same rotation; the family's function also moves the pairs' elements apart,
        # the same way in q and k (the attention scores do not change).
        ours_q = _deinterleave(ours_q, rope.rotary_dim)
        ours_k = _deinterleave(ours_k, rope.rotary_dim)
    difference = max(float((hf_q - ours_q).abs().max()), float((hf_k - ours_k).abs().max()))
    if difference <= 2e-3:
        note = f"; {DEINTERLEAVED}" if deinterleaved else ""
        return Outcome(label, "match", f"max difference {difference:.1e}{note}", model_type)
    detail = _diagnose(rope, q, hf_q, positions, difference)
    return Outcome(label, "mismatch", detail, model_type)


def _diagnose(rope: Any, q: Any, hf_q: Any, positions: Any, difference: float) -> str:
    """Which other rotation the family's matches, if one of the usual suspects does."""
    suspects = {
        "interleaved pairs": {"interleaved": not rope.interleaved},
        "the negative angle": {"inverse": True},
    }
    for name, change in suspects.items():
        options = {"rotary_dim": rope.rotary_dim, "base": rope.base, "scaling": rope.scaling}
        inverse = change.pop("inverse", False)
        options["interleaved"] = change.get("interleaved", rope.interleaved)
        other = anyrope.RoPE(rope.head_dim, **options)
        y = other.rotate(q, positions, layout="bhsd", inverse=inverse, impl="array_api")
        if float((y - hf_q).abs().max()) <= 2e-3:
            return f"the family uses {name} (max difference {difference:.2f})"
    unchanged = np.flatnonzero(((hf_q - q).abs().amax(dim=(0, 1, 2)) == 0).numpy())
    return (
        f"max difference {difference:.2f}; rotary_dim {rope.rotary_dim} of {rope.head_dim}, "
        f"the family leaves {unchanged.size} features unrotated"
    )
