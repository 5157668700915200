"""Draw how RoPE turns one pair of features as the position grows.

Usage: ``python plot_rotation.py OUTPUT_DIR`` writes ``rotation.png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import anyrope

HEAD_DIM = 8
POSITIONS = 40


def main(outdir: Path) -> None:
    # One head of 4 pairs in the default half-split pairing, pair i = (x[i], x[i + half]),
    # every pair starting at (1, 0): after rotation, pair i at position m sits at angle
    # m * theta_i on the unit circle.
    half = HEAD_DIM // 2
    x = np.zeros((POSITIONS, 1, HEAD_DIM))
    x[:, :, :half] = 1.0
    y = anyrope.rotate(x)[:, 0, :]
    theta = anyrope.RoPE(HEAD_DIM).inv_freq

    fig, axes = plt.subplots(1, HEAD_DIM // 2, figsize=(13, 3.6), layout="constrained")
    circle = np.linspace(0.0, 2.0 * np.pi, 200)
    m = np.arange(POSITIONS)
    for i, ax in enumerate(axes):
        ax.plot(np.cos(circle), np.sin(circle), color="0.85", linewidth=1)
        points = ax.scatter(y[:, i], y[:, i + half], c=m, cmap="viridis", s=18, zorder=3)
        for label in (0, 1, 2, 3):
            ax.annotate(
                str(label),
                (y[label, i], y[label, i + half]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=8,
            )
        ax.set_title(f"pair i={i}, theta_i={theta[i]:.3g} rad")
        ax.set_aspect("equal")
        ax.set_xlim(-1.3, 1.3)
        ax.set_ylim(-1.3, 1.3)
        ax.set_xlabel(f"x[{i}]")
        ax.set_ylabel(f"x[{i + half}]")
    fig.colorbar(points, ax=axes, label="position m", shrink=0.8)
    fig.suptitle(
        f"A pair (1, 0) rotated by m * theta_i, head_dim={HEAD_DIM}, base 10000,"
        " half-split pairs (x[i], x[i + head_dim/2])"
    )
    fig.savefig(outdir / "rotation.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
