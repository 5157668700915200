"""``anyrope plot``: frequencies and wavelengths of a model config, scaled and unscaled.

Reads a Hugging Face ``config.json`` with :func:`anyrope.scaling.from_hf_config` and
draws, per pair index, the frequency ``theta_i`` and the wavelength ``2 pi / theta_i``
in tokens, for the config's scaling method next to the unscaled frequencies. The title
and the line printed say which layers it draws: the ``--layer-type`` asked for (required
where the config, in its current or an older format, gives settings per layer type), or
every layer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..scaling import HFRopeConfig, RopeScaling, from_hf_config
from ..scaling.hf import layer_types
from ._stdout import EXIT_MISSING_PACKAGE, add_output, fail


def run(args: argparse.Namespace) -> int:
    try:
        config = json.loads(Path(args.config).read_text())
    except OSError as error:
        return fail("plot", f"cannot read --config {args.config}: {error.strerror}")
    except json.JSONDecodeError as error:
        return fail("plot", f"--config {args.config} is not valid JSON: {error}")
    try:
        kinds = layer_types(config) if isinstance(config, dict) else None
        if kinds is None or args.layer_type is not None:
            settings = from_hf_config(config, layer_type=args.layer_type)
    except (TypeError, ValueError) as error:
        return fail("plot", f"--config {args.config}: {error}")
    if kinds is not None and args.layer_type is None:
        return fail(
            "plot",
            f"--config {args.config} gives RoPE settings per layer type; pass --layer-type, "
            f"one of: {', '.join(kinds)}",
        )
    if args.seq_len is not None and args.seq_len <= 0:
        return fail("plot", f"--seq-len must be positive; got {args.seq_len}")
    try:
        import matplotlib
    except ImportError:
        return fail(
            "plot", "plotting needs matplotlib: pip install matplotlib", EXIT_MISSING_PACKAGE
        )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    content = describe_plot(settings, args.seq_len)
    pairs = np.arange(settings.rotary_dim // 2)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, layout="constrained")
    for freq, label, color in content.curves:
        top.semilogy(pairs, freq, ".-", color=color, label=label, markersize=3)
        bottom.semilogy(pairs, 2 * math.pi / freq, ".-", color=color, label=label, markersize=3)
    for length, label, style in content.contexts:
        bottom.axhline(length, color="tab:red", linestyle=style, linewidth=1, label=label)
    for index, (first, stop, name) in enumerate(content.sections):
        for ax in (top, bottom):
            ax.axvspan(first - 0.5, stop - 0.5, color=("0.94", "0.86")[index % 2], zorder=0)
        top.annotate(
            name,
            xy=((first + stop - 1) / 2, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -12),
            textcoords="offset points",
            ha="center",
            fontsize=9,
        )
    top.set_ylabel("theta_i (radians per token)")
    bottom.set_ylabel("wavelength 2 pi / theta_i (tokens)")
    bottom.set_xlabel("pair index i")
    top.legend(fontsize=9, loc="lower left")
    bottom.legend(fontsize=9, loc="upper left")
    drawn = _drawn_layers(config, args.layer_type)
    fig.suptitle(f"{Path(args.config).name} [{drawn}]\n{content.title}")
    target = args.output / (
        "frequencies.png" if args.layer_type is None else f"frequencies-{args.layer_type}.png"
    )
    fig.savefig(target, dpi=110)
    plt.close(fig)
    print(f"wrote {target}: {drawn}, {content.title}")
    return 0


def _drawn_layers(config: Any, layer_type: str | None) -> str:
    """Which layers the plot shows: the layer type asked for, or every layer."""
    if layer_type is not None:
        return f"layer type {layer_type}"
    declared = config.get("layer_types") if isinstance(config, dict) else None
    if declared and len(set(declared)) > 1:
        return f"every layer type ({', '.join(dict.fromkeys(declared))}): one set of settings"
    return "every layer"


@dataclass(frozen=True)
class PlotContent:
    """What the plot of one config shows, as plain data (tested without matplotlib)."""

    title: str
    curves: list[tuple[Any, str, str]]
    """(frequencies, legend label, color) per curve: the unscaled ones, then the scaled."""
    contexts: list[tuple[int, str, str]]
    """(tokens, legend label, line style) per context length drawn on the wavelengths."""
    sections: list[tuple[int, int, str]]
    """(first pair, stop pair, name) of each M-RoPE or axial section; empty otherwise."""


def describe_plot(settings: HFRopeConfig, seq_len: int | None) -> PlotContent:
    """The title, curves, context lines and sections of the plot of ``settings``."""
    scaling = settings.scaling
    rotary, base = settings.rotary_dim, settings.base
    length = seq_len or settings.max_position_embeddings
    scaled, factor = scaling.frequencies(rotary, base, seq_len=length)
    plain, _ = RopeScaling().frequencies(rotary, base)
    method = _method(scaling)
    curves: list[tuple[Any, str, str]] = [(plain, "unscaled", "0.5")]
    if scaling.rope_type != "default":
        label = f"{method}, seq_len={length}" if scaling.depends_on_length else method
        still = int(np.count_nonzero(scaled == 0.0))
        if still:
            # Pairs of frequency 0 do not turn: no point on a log axis, no wavelength.
            label += f" ({still} pairs from {len(scaled) - still} on do not turn)"
            scaled = np.where(scaled == 0.0, np.nan, scaled)
        curves.append((scaled, label, "tab:blue"))
    sections = _sections(scaling, rotary)
    title = f"head_dim={settings.head_dim}, rotary_dim={rotary}, base={base:g}, {method}"
    if sections:
        title += " (" + ", ".join(f"{name} {stop - first}" for first, stop, name in sections)
        title += " pairs)"
    if factor != 1.0:
        title += f", attention factor {factor:.4g}"
    return PlotContent(title, curves, _contexts(settings), sections)


def _method(scaling: RopeScaling) -> str:
    """The scaling method's name, with M-RoPE or axial said when the sections are theirs."""
    if scaling.rope_type == "axial":
        return "axial"
    if scaling.mrope_section is not None:
        return "M-RoPE" if scaling.rope_type == "default" else f"M-RoPE, {scaling.rope_type}"
    return scaling.rope_type


def _sections(scaling: RopeScaling, rotary: int) -> list[tuple[int, int, str]]:
    pairs = scaling.sections(rotary)
    if pairs is None:
        return []
    if scaling.rope_type == "axial":
        names = [f"axis {i}" for i in range(len(pairs))]
    else:
        names = ["temporal", "height", "width"][: len(pairs)]
    stops = list(itertools.accumulate(pairs))
    return list(zip([0, *stops[:-1]], stops, names, strict=True))


def _contexts(settings: HFRopeConfig) -> list[tuple[int, str, str]]:
    """The trained (original) context and the context the scaling reaches.

    The target is ``max_position_embeddings`` when it exceeds the original context
    (Llama 3.1: 8192 and 131072); when a config repeats the original there (Qwen2.5 with
    YaRN: 32768 and 32768, factor 4), the target is ``factor`` x the original.
    """
    scaling = settings.scaling
    original = scaling.original_max_position_embeddings
    longest = settings.max_position_embeddings
    if original is None or scaling.rope_type == "default":
        return [] if longest is None else [(longest, f"max_position_embeddings = {longest}", "--")]
    lines = [(original, f"original context = {original}", ":")]
    if longest is not None and longest > original:
        lines.append((longest, f"target context = {longest} (max_position_embeddings)", "--"))
    elif scaling.factor is not None and scaling.factor != 1.0:
        target = round(scaling.factor * original)
        lines.append(
            (target, f"target context = {target} (factor {scaling.factor:g} x original)", "--")
        )
    return lines


def register(commands: Any) -> None:
    """Add the ``plot`` subcommand to the CLI's sub-parsers."""
    parser = commands.add_parser(
        "plot",
        help="plot the frequencies and wavelengths of a model config (scaled and unscaled)",
        description=(
            "Draw theta_i and the wavelength 2 pi / theta_i of every rotary pair for a "
            "Hugging Face config.json, with its frequency scaling next to the unscaled "
            "frequencies. Exit codes: 0 written, 2 bad arguments or config, "
            f"{EXIT_MISSING_PACKAGE} matplotlib missing."
        ),
    )
    parser.add_argument("--config", required=True, help="path to a Hugging Face config.json")
    add_output(
        parser,
        "folder for frequencies.png (frequencies-LAYER_TYPE.png with --layer-type; default: .)",
    )
    parser.add_argument(
        "--layer-type",
        help="the layer type to draw, for configs with RoPE settings per layer type "
        "(Gemma 3 and 4: full_attention, sliding_attention)",
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        help="sequence length for length-dependent methods (dynamic, longrope); "
        "default: max_position_embeddings",
    )
    parser.set_defaults(run=run)
