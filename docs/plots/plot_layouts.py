"""Draw which features form a pair in the half-split and interleaved layouts.

Usage: ``python plot_layouts.py OUTPUT_DIR`` writes ``layouts.png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

HEAD_DIM = 8


def pair_of(feature: int, *, interleaved: bool) -> int:
    return feature // 2 if interleaved else feature % (HEAD_DIM // 2)


def partner(feature: int, *, interleaved: bool) -> int:
    if interleaved:
        return feature ^ 1
    return (feature + HEAD_DIM // 2) % HEAD_DIM


def main(outdir: Path) -> None:
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(2, 1, figsize=(9, 4.2), layout="constrained")
    rows = (
        (False, 'half-split  (interleaved=False; Hugging Face rotate_half, GPT-NeoX, "neox")'),
        (True, 'interleaved (interleaved=True; Meta complex form, GPT-J, DeepSeek, "gptj")'),
    )
    for ax, (interleaved, title) in zip(axes, rows, strict=True):
        for f in range(HEAD_DIM):
            i = pair_of(f, interleaved=interleaved)
            ax.add_patch(Rectangle((f, 0), 0.9, 0.9, color=colors[i], alpha=0.8))
            ax.text(f + 0.45, 0.45, f"x[{f}]", ha="center", va="center", fontsize=10)
            ax.text(f + 0.45, -0.25, f"pair {i}", ha="center", va="center", fontsize=8)
            other = partner(f, interleaved=interleaved)
            if other > f:
                ax.add_patch(
                    FancyArrowPatch(
                        (f + 0.45, 0.95),
                        (other + 0.45, 0.95),
                        connectionstyle="arc3,rad=-0.35",
                        arrowstyle="<->",
                        mutation_scale=10,
                        color=colors[i],
                    )
                )
        ax.set_xlim(-0.2, HEAD_DIM + 0.1)
        ax.set_ylim(-0.5, 2.3)
        ax.set_title(title, fontsize=10, loc="left")
        ax.axis("off")
    fig.suptitle(f"Which features rotate together (head_dim={HEAD_DIM})")
    fig.savefig(outdir / "layouts.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
