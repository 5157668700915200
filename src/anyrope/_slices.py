"""The features from ``start_index`` on, as views, and the whole head put back together.

A RoPE with ``start_index`` rotates ``x[..., start:]`` as a head of ``head_dim - start``
features (its first ``rotary_dim`` rotate, the rest are copied) and keeps the features
before ``start`` as they are.
"""

from __future__ import annotations

from ._namespace import Array, Namespace


def tails(
    arrays: tuple[Array, ...], names: tuple[str, ...], head_dim: int, start: int
) -> tuple[Array, ...]:
    """Views of the features from ``start`` on, each array checked to have ``head_dim``."""
    for x, name in zip(arrays, names, strict=True):
        if len(x.shape) == 0 or x.shape[-1] != head_dim:
            raise ValueError(
                f"`{name}` must have head_dim={head_dim} in its last axis; "
                f"got shape {tuple(x.shape)}"
            )
    return tuple(x[..., start:] for x in arrays)


def rejoin(
    arrays: tuple[Array, ...], rotated: tuple[Array, ...], start: int, xp: Namespace
) -> tuple[Array, ...]:
    """New arrays of the features before ``start`` and the rotated tails."""
    return tuple(
        xp.concat((x[..., :start], y), axis=-1) for x, y in zip(arrays, rotated, strict=True)
    )
