"""Draw what each context-extension method does to the RoPE wavelengths.

Usage: ``python plot_scaling.py OUTPUT_DIR`` writes ``scaling.png``: the wavelength
``2 pi / inv_freq_i`` of every pair for default, linear, NTK, YaRN and Llama 3
scaling (factor 8, original context 4096), and YaRN's ramp between the pairs it keeps
and the pairs it interpolates.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from anyrope.scaling import RopeScaling, yarn

ROTARY_DIM = 128
BASE = 10000.0
FACTOR = 8.0
ORIGINAL = 4096

METHODS = {
    "default": RopeScaling(),
    "linear (factor 8)": RopeScaling("linear", factor=FACTOR),
    "NTK (factor 8)": RopeScaling("ntk", factor=FACTOR),
    "YaRN (factor 8)": RopeScaling(
        "yarn", factor=FACTOR, original_max_position_embeddings=ORIGINAL
    ),
    "Llama 3 (factor 8, low 1, high 4)": RopeScaling(
        "llama3",
        factor=FACTOR,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=ORIGINAL,
    ),
}
STYLES = ["-", "--", "-.", "-", ":"]


def main(outdir: Path) -> None:
    pairs = np.arange(ROTARY_DIM // 2)
    fig, (waves, ramp) = plt.subplots(
        1, 2, figsize=(12, 4.8), layout="constrained", gridspec_kw={"width_ratios": [3, 2]}
    )
    for (label, scaling), style in zip(METHODS.items(), STYLES, strict=True):
        inv_freq, _ = scaling.frequencies(ROTARY_DIM, BASE)
        waves.semilogy(pairs, 2 * math.pi / inv_freq, style, label=label, linewidth=1.8)
    waves.axhline(ORIGINAL, color="grey", linewidth=0.8)
    waves.text(1, ORIGINAL * 1.3, f"original context {ORIGINAL}", color="grey")
    waves.axhline(ORIGINAL * FACTOR, color="grey", linewidth=0.8, linestyle=":")
    waves.text(
        1, ORIGINAL * FACTOR * 1.3, f"extended context {int(ORIGINAL * FACTOR)}", color="grey"
    )
    waves.set_xlabel("pair index i")
    waves.set_ylabel("wavelength 2 pi / inv_freq_i (positions)")
    waves.set_title(f"Wavelength per pair (rotary_dim {ROTARY_DIM}, base {BASE:g})")
    waves.legend(loc="lower right")

    low, high = yarn.correction_range(
        ROTARY_DIM,
        BASE,
        beta_fast=32,
        beta_slow=1,
        original_max_position_embeddings=ORIGINAL,
        truncate=True,
    )
    ramp.plot(pairs, yarn.ramp(low, high, pairs.size), color="C3", linewidth=2)
    for edge, name in (
        (low, "low = floor(corr(beta_fast=32))"),
        (high, "high = ceil(corr(beta_slow=1))"),
    ):
        ramp.axvline(edge, color="grey", linewidth=0.8, linestyle="--")
        ramp.text(edge + 0.6, 0.5, f"{name}, i = {edge}", rotation=90, va="center", color="grey")
    ramp.set_xlabel("pair index i")
    ramp.set_ylabel("ramp_i: 0 keep, 1 interpolate (inv_freq / factor)")
    ramp.set_title("YaRN ramp (original context 4096)")
    ramp.set_ylim(-0.05, 1.05)
    fig.savefig(outdir / "scaling.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
