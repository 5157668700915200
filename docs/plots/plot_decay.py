"""Draw RoFormer's long-range decay bound (section 3.4.3) against the relative distance.

Usage: ``python plot_decay.py OUTPUT_DIR`` writes ``decay.png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from anyrope.attention import relative_decay_bound

DISTANCES = np.arange(0, 1025)
WIDTHS = (32, 64, 128)
OCTAVES = [(2**j, 2 ** (j + 1)) for j in range(10)]


def main(outdir: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    for dim in WIDTHS:
        bound = relative_decay_bound(DISTANCES, dim)
        left.plot(DISTANCES[:257], bound[:257], label=f"d = {dim}", linewidth=1.2)
        (line,) = right.plot(DISTANCES[1:], bound[1:], linewidth=0.6, alpha=0.45)
        centers = [np.sqrt(lo * hi) for lo, hi in OCTAVES]
        means = [bound[lo:hi].mean() for lo, hi in OCTAVES]
        right.plot(centers, means, "o-", color=line.get_color(), label=f"d = {dim}, octave mean")
    left.set_title("base 10000, |m - n| up to 256 (RoFormer's figure 2)")
    right.set_title("up to 1024, log-log, with the mean of each octave")
    right.set_xscale("log")
    right.set_yscale("log")
    for ax in (left, right):
        ax.set_xlabel("relative distance |m - n|")
        ax.set_ylabel("relative upper bound  mean_j |S_j|")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Long-range decay of the RoPE score bound")
    fig.savefig(outdir / "decay.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
