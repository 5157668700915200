"""Draw anyrope's float16 error against a float64 reference, by position.

Usage: ``python plot_accuracy.py OUTPUT_DIR`` writes ``accuracy.png``.

The reference rotates the same float16 inputs in float64 with float64 angles (the
complex form). Errors are in units in the last place (ulp) of float16 at the
magnitude of each input pair, as in the numerical contract. For contrast, the plot
also shows what float32 angles (``float32(m) * float32(theta)``, what most other
implementations compute) give with the same float32 rotation.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import anyrope

HEAD_DIM = 128
HEADS = 4


def ulp_error(y: np.ndarray, reference: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Largest error per position, in float16 ulp at each input pair's magnitude."""
    half = HEAD_DIM // 2
    magnitude = np.hypot(x[..., :half], x[..., half:]).astype(np.float64)
    ulp = np.spacing(magnitude.astype(np.float16)).astype(np.float64)
    error = np.abs(y.astype(np.float64) - reference)
    per_pair = np.maximum(error[..., :half], error[..., half:]) / ulp
    return per_pair.reshape(per_pair.shape[0], -1).max(axis=1)


def rotate_half_split(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = HEAD_DIM // 2
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * cos - x1 * sin, x1 * cos + x0 * sin], axis=-1)


def main(outdir: Path) -> None:
    rng = np.random.default_rng(0)
    positions = np.unique(np.geomspace(1, 2**20, 160).astype(np.int64))
    x = rng.standard_normal((positions.size, HEADS, HEAD_DIM)).astype(np.float16)
    theta = anyrope.RoPE(HEAD_DIM).inv_freq

    angle64 = positions[:, None, None].astype(np.float64) * theta
    reference = rotate_half_split(x.astype(np.float64), np.cos(angle64), np.sin(angle64))

    ours = anyrope.rotate(x, positions)
    angle32 = positions[:, None, None].astype(np.float32) * theta.astype(np.float32)
    peer = rotate_half_split(x.astype(np.float32), np.cos(angle32), np.sin(angle32)).astype(
        np.float16
    )

    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    ax.plot(
        positions,
        ulp_error(peer, reference, x),
        ".",
        color="tab:red",
        markersize=4,
        label="float32 angles (float32(m) * float32(theta))",
    )
    ax.plot(
        positions,
        ulp_error(ours, reference, x),
        ".",
        color="tab:blue",
        markersize=4,
        label="anyrope (float64 angles, float32 tables)",
    )
    ax.axhline(0.5, color="0.4", linestyle="--", linewidth=1, label="0.5 ulp (correct rounding)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("position m")
    ax.set_ylabel("max error, float16 ulp at |pair|")
    ax.set_title(f"float16 RoPE vs a float64 reference, head_dim={HEAD_DIM}")
    ax.legend(loc="upper left", fontsize=9)
    fig.savefig(outdir / "accuracy.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
