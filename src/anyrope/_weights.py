"""Converting q/k projection weights between interleaved and half-split checkpoints.

Meta's reference Llama code rotates pairs ``(x[2i], x[2i+1])`` of each head (the
complex form); Hugging Face rotates pairs ``(x[i], x[i + d/2])`` (``rotate_half``).
Hugging Face's conversion script reorders the output rows of ``wq`` and ``wk`` inside
every head so that the same model gives the same attention scores with its layout.
"""

from __future__ import annotations

from typing import Literal

from ._namespace import Array, Namespace, namespace_of
from ._validation import check_choice, check_even, check_int

__all__ = ["permute_qk_weights"]


def permute_qk_weights(
    w: Array,
    n_heads: int,
    *,
    to: Literal["half", "interleaved"] = "half",
    rotary_dim: int | None = None,
    xp: Namespace | None = None,
) -> Array:
    """Reorder q/k projection rows between interleaved and half-split RoPE layouts.

    A q or k projection with weight ``w`` of shape ``(n_heads * head_dim, in_features)``
    (PyTorch's ``Linear`` convention, output rows first) or a bias of shape
    ``(n_heads * head_dim,)`` produces ``n_heads`` heads of ``head_dim`` features each.
    With ``to="half"`` the features of every head are reordered from the interleaved
    order ``0, 1, 2, 3, ...`` (pairs ``(2i, 2i+1)``, Meta's checkpoints) to the
    half-split order (pairs ``(i, i + head_dim/2)``, Hugging Face checkpoints): the
    permutation Hugging Face's ``convert_llama_weights_to_hf.py`` applies. ``to=
    "interleaved"`` is its inverse. Rotating the converted projection with
    ``interleaved=False`` then gives the same attention scores as rotating the original
    with ``interleaved=True``.

    A partial rotation (GPT-J's ``rotary_dim``, ``partial_rotary_factor``) turns only the
    first ``rotary_dim`` features of each head: pass the same ``rotary_dim`` here, so
    that only those are reordered and the others keep their places. Without it the
    whole head is reordered, which gives other scores for such a model.

    Parameters
    ----------
    w : array
        Weight of shape ``(n_heads * head_dim, in_features)`` or bias of shape
        ``(n_heads * head_dim,)``, of any array-API library.
    n_heads : int
        Number of heads this projection produces (the key/value head count for
        ``wk`` under grouped-query attention).
    to : {"half", "interleaved"}, default "half"
        The layout of the returned weight.
    rotary_dim : int, optional
        The rotated width of each head (the ``rotary_dim`` of the RoPE that rotates the
        projection); the whole head when omitted.
    xp : namespace, optional
        Array namespace of ``w``; inferred when omitted.

    Returns
    -------
    array
        The permuted weight: same library, device, dtype and shape as ``w``. Only the
        order of rows changes; values are copied exactly.

    Raises
    ------
    TypeError
        If ``w`` is not an array or ``n_heads`` is not an integer.
    ValueError
        If ``to`` is unknown, ``w`` is not 1-D or 2-D, ``n_heads`` is not positive, the
        rows do not split into ``n_heads`` heads of even width, or ``rotary_dim`` is not
        a positive even integer at most that width.

    Examples
    --------
    One head of width 4 with one input feature: the interleaved rows ``0, 1, 2, 3``
    (pairs ``(0, 1)``, ``(2, 3)``) become ``0, 2, 1, 3`` (pairs ``(0, 2)`` and ``(1, 3)``
    in half-split order), and back.

    >>> import numpy as np
    >>> import anyrope
    >>> w = np.arange(4.0).reshape(4, 1)
    >>> anyrope.permute_qk_weights(w, 1, to="half")[:, 0]
    array([0., 2., 1., 3.])
    >>> back = anyrope.permute_qk_weights(anyrope.permute_qk_weights(w, 1), 1, to="interleaved")
    >>> bool((back == w).all())
    True
    """
    check_choice(to, "to", ("half", "interleaved"))
    n_heads = check_int(n_heads, "n_heads", 1, 2**63, "positive")
    xp = namespace_of(w, xp=xp, argument="w")
    if w.ndim not in (1, 2):
        raise ValueError(
            f"`w` must be a 2-D weight (out_features, in_features) or a 1-D bias; "
            f"got shape {tuple(w.shape)}"
        )
    rows = int(w.shape[0])
    if rows % n_heads != 0 or (rows // n_heads) % 2 != 0:
        raise ValueError(
            f"`w` has {rows} rows, which do not split into n_heads={n_heads} heads of even width"
        )
    head_dim = rows // n_heads
    width = head_dim if rotary_dim is None else check_even(rotary_dim, "rotary_dim", head_dim)
    rest = tuple(int(s) for s in w.shape[1:])
    heads = xp.reshape(w, (n_heads, head_dim, *rest))
    # Interleaved rows of a head are indexed (i, j) with j the position inside pair i;
    # half-split rows are indexed (j, i). Converting is a transpose of those two axes.
    source = (n_heads, width // 2, 2) if to == "half" else (n_heads, 2, width // 2)
    axes = (0, 2, 1, *range(3, 3 + len(rest)))
    rotated = xp.permute_dims(xp.reshape(heads[:, :width, ...], (*source, *rest)), axes)
    permuted = xp.reshape(rotated, (n_heads, width, *rest))
    if width < head_dim:
        permuted = xp.concat((permuted, heads[:, width:, ...]), axis=1)
    return xp.reshape(permuted, (rows, *rest))
