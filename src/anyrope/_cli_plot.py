"""``anyrope plot``: frequencies and wavelengths of a model config, scaled and unscaled.

Reads a Hugging Face ``config.json`` with :func:`anyrope.scaling.from_hf_config` and
draws, per pair index, the frequency ``theta_i`` and the wavelength ``2 pi / theta_i``
in tokens, for the config's scaling method next to the unscaled frequencies.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from .scaling import from_hf_config

#: Exit code when an optional package the subcommand needs is missing.
MISSING_PACKAGE = 3


def _fail(message: str, code: int) -> int:
    print(f"anyrope plot: error: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    try:
        config = json.loads(Path(args.config).read_text())
    except OSError as error:
        return _fail(f"cannot read --config {args.config}: {error.strerror}", 2)
    except json.JSONDecodeError as error:
        return _fail(f"--config {args.config} is not valid JSON: {error}", 2)
    try:
        settings = from_hf_config(config)
    except (TypeError, ValueError) as error:
        return _fail(f"--config {args.config}: {error}", 2)
    if args.seq_len is not None and args.seq_len <= 0:
        return _fail(f"--seq-len must be positive; got {args.seq_len}", 2)
    try:
        import matplotlib
    except ImportError:
        return _fail(
            "plotting needs matplotlib: pip install matplotlib (or 'anyrope[cli]')",
            MISSING_PACKAGE,
        )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from .scaling import RopeScaling

    seq_len = args.seq_len or settings.max_position_embeddings
    rotary, base = settings.rotary_dim, settings.base
    scaled, factor = settings.scaling.frequencies(rotary, base, seq_len=seq_len)
    plain, _ = RopeScaling().frequencies(rotary, base)
    pairs = np.arange(rotary // 2)
    method = settings.scaling.rope_type

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, layout="constrained")
    curves: list[tuple[Any, str, str]] = [(plain, "unscaled (default)", "0.5")]
    if method != "default":
        curves.append((scaled, f"{method}, seq_len={seq_len}", "tab:blue"))
    for freq, label, color in curves:
        top.semilogy(pairs, freq, ".-", color=color, label=label, markersize=3)
        bottom.semilogy(pairs, 2 * math.pi / freq, ".-", color=color, label=label, markersize=3)
    lengths = {
        "max_position_embeddings": settings.max_position_embeddings,
        "original_max_position_embeddings": settings.scaling.original_max_position_embeddings,
    }
    for (name, length), style in zip(lengths.items(), ("--", ":"), strict=True):
        if length is not None:
            bottom.axhline(
                length, color="tab:red", linestyle=style, linewidth=1, label=f"{name} = {length}"
            )
    top.set_ylabel("theta_i (radians per token)")
    bottom.set_ylabel("wavelength 2 pi / theta_i (tokens)")
    bottom.set_xlabel("pair index i")
    top.legend(fontsize=9)
    bottom.legend(fontsize=9)
    fig.suptitle(
        f"{Path(args.config).name}\nhead_dim={settings.head_dim}, rotary_dim={rotary}, "
        f"base={base:g}, {method}, attention factor {factor:.4g}"
    )
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    target = output / "frequencies.png"
    fig.savefig(target, dpi=110)
    plt.close(fig)
    print(f"wrote {target}")
    return 0


def register(commands: Any) -> None:
    """Add the ``plot`` subcommand to the CLI's sub-parsers."""
    parser = commands.add_parser(
        "plot",
        help="plot the frequencies and wavelengths of a model config (scaled and unscaled)",
        description=(
            "Draw theta_i and the wavelength 2 pi / theta_i of every rotary pair for a "
            "Hugging Face config.json, with its frequency scaling next to the unscaled "
            "frequencies. Exit codes: 0 written, 2 bad arguments or config, "
            f"{MISSING_PACKAGE} matplotlib missing."
        ),
    )
    parser.add_argument("--config", required=True, help="path to a Hugging Face config.json")
    parser.add_argument("--output", default=".", help="folder for frequencies.png (default: .)")
    parser.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="sequence length for length-dependent methods (dynamic, longrope); "
        "default: max_position_embeddings",
    )
    parser.set_defaults(run=run)
