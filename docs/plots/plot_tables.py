"""Draw the cos and sin tables anyrope builds, as heatmaps.

Usage: ``python plot_tables.py OUTPUT_DIR`` writes ``tables.png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import anyrope

HEAD_DIM = 128
POSITIONS = 512


def main(outdir: Path) -> None:
    rope = anyrope.RoPE(HEAD_DIM)
    cos, sin = rope.tables(np.arange(POSITIONS), dtype=np.float64)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained", sharey=True)
    for ax, table, name in zip(axes, (cos, sin), ("cos(m theta_i)", "sin(m theta_i)"), strict=True):
        image = ax.imshow(
            table,
            aspect="auto",
            origin="lower",
            cmap="RdBu_r",
            vmin=-1.0,
            vmax=1.0,
            interpolation="nearest",
        )
        ax.set_title(name)
        ax.set_xlabel("pair index i (theta_i = 10000^(-2i/d))")
    axes[0].set_ylabel("position m")
    fig.colorbar(image, ax=axes, shrink=0.9)
    fig.suptitle(f"RoPE tables, head_dim={HEAD_DIM}: low i turn fast, high i barely move")
    fig.savefig(outdir / "tables.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
