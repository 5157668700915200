"""The functional API: :func:`rotate` and :func:`rotate_qk`, backed by cached RoPE objects."""

from __future__ import annotations

import contextlib
import operator
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from . import _tables, _threads
from . import _torch_op as torch_op
from ._namespace import Array, Namespace, namespace_of
from ._rope import RoPE
from ._validation import check_base, check_bool, check_int, check_rotary_dim, describe
from .scaling import RopeScaling, parse_rope_scaling

CACHE_BYTES = 256 * 2**20
"""Bytes of cos/sin tables that :func:`rotate` and :func:`rotate_qk` keep between calls,
over all the settings they have seen; the least recently used settings go first."""

CACHE_ENTRIES = 64
"""Settings (head_dim, rotary_dim, base, interleaved, scaling) kept at most."""

_ropes: OrderedDict[tuple[Any, ...], RoPE] = OrderedDict()
_known: dict[tuple[Any, ...], tuple[Any, ...]] = {}
"""The arguments of earlier calls as given, mapped to their validated settings."""
_pinned: dict[int, RoPE] = {}
"""The RoPEs that code compiled by torch.compile calls, by their op key: kept for the life of the
process (the compiled code names their tables by key), their tables freed by clear_cache."""
_lock = _threads.lock()
_measured = -1


def clear_cache() -> None:
    """Forget the tables that :func:`rotate` and :func:`rotate_qk` keep between calls.

    The functional API keeps one :class:`RoPE` per combination of settings, at most
    ``CACHE_ENTRIES`` of them and ``CACHE_BYTES`` (256 MiB) of tables in all. Calling
    this frees them now; later calls rebuild what they need, with the same bits. A
    :class:`RoPE` you hold has its own tables (see :meth:`RoPE.clear_cache`).

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> _ = anyrope.rotate(np.zeros((1, 4, 2, 64), dtype=np.float32))
    >>> anyrope.clear_cache()
    >>> anyrope.cache_nbytes()
    0
    """
    with _lock:
        _ropes.clear()
        _known.clear()
        for rope in _pinned.values():
            rope.clear_cache()


def cache_nbytes() -> int:
    """Return the bytes of cos/sin tables the functional API keeps now.

    One name for one question, in the form each place allows: a module has no
    properties, so the functional API's tables are counted by this function, and a
    :class:`RoPE` you hold counts its own with the property :attr:`RoPE.cache_nbytes`
    (read without a call, like its other attributes). Both count every library, device
    and dtype the tables were built for; :func:`clear_cache` and
    :meth:`RoPE.clear_cache` free them.

    Returns
    -------
    int
        Bytes held by the tables of every cached setting (see :func:`clear_cache`).

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> anyrope.clear_cache()
    >>> _ = anyrope.rotate(np.zeros((1, 4, 2, 64), dtype=np.float32), impl="array_api")
    >>> anyrope.cache_nbytes()    # 256 positions x 32 pairs, cos and sin in float32
    65536
    """
    with _lock:
        held = {rope._op_target.key: rope for rope in _ropes.values()} | _pinned
        return sum(rope.cache_nbytes for rope in held.values())


def _rope_for_input(
    x: Array,
    name: str,
    rotary_dim: int | None,
    base: float,
    interleaved: bool,
    *,
    scaling: Mapping[str, Any] | RopeScaling | None,
    max_position_embeddings: int | None,
    start_index: int = 0,
) -> RoPE:
    """The cached :class:`RoPE` for an input whose last axis is the head dimension."""
    shape = getattr(x, "shape", None)
    head_dim = int(shape[-1]) if shape else 0
    # Keyed by the arguments as given (with their types, so that 1 is not True): a call
    # repeating known settings skips their validation, which they passed the first time.
    # A scaling dict may change after the call: it is parsed again each time.
    key: tuple[Any, ...] | None = None
    if not isinstance(scaling, Mapping):
        key = (
            head_dim,
            rotary_dim,
            type(rotary_dim),
            base,
            type(base),
            interleaved,
            type(interleaved),
            max_position_embeddings,
            type(max_position_embeddings),
            scaling,
            start_index,
            type(start_index),
        )
    try:
        settings = None if key is None else _known.get(key)
    except TypeError:  # an unhashable argument: validation below names it
        key, settings = None, None
    rope = None if settings is None else _ropes.get(settings)
    if settings is not None and rope is not None:
        with contextlib.suppress(KeyError):  # evicted by another thread meanwhile
            _ropes.move_to_end(settings)
        return rope
    namespace_of(x, argument=name)
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(
            f"the last axis of `{name}` (head_dim) must have a positive even length; "
            f"got {describe(x)}"
        )
    if rotary_dim is not None:
        check_rotary_dim(rotary_dim, head_dim)
    parsed = parse_rope_scaling(scaling, max_position_embeddings=max_position_embeddings)
    settings = (
        head_dim,
        rotary_dim,
        check_base(base),
        check_bool(interleaved, "interleaved"),
        parsed,
        check_int(start_index, "start_index"),
    )
    with _lock:
        rope = _ropes.get(settings)
        if rope is None:
            rope = RoPE(
                head_dim,
                rotary_dim=rotary_dim,
                base=base,
                interleaved=interleaved,
                scaling=parsed,
                start_index=start_index,
            )
            _ropes[settings] = rope
        if key is not None:
            if len(_known) >= 4 * CACHE_ENTRIES:
                _known.clear()
            _known[key] = settings
    return rope


def _compiled_target(
    x: Array,
    name: str,
    rotary_dim: int | None,
    base: float,
    interleaved: bool,
    *,
    scaling: Mapping[str, Any] | RopeScaling | None,
    max_position_embeddings: int | None,
    start_index: int,
) -> torch_op.Target | None:
    """The op target of a call that torch.compile traces (see :func:`_compiled_rope`);
    ``None`` for every other call."""
    if not torch_op.compiling(x):
        return None
    found = _compiled_rope(
        # operator.index: Dynamo specializes a symbolic head width (dynamic shapes) to
        # the constant it is, guarded, which int() would leave symbolic.
        operator.index(x.shape[-1]) if x.ndim else 0,
        x.dtype,
        name,
        # With dynamic=True, Dynamo makes numbers symbolic (defaults such as `base` too).
        torch_op.concrete(rotary_dim),
        torch_op.concrete(base),
        interleaved,
        scaling,
        torch_op.concrete(max_position_embeddings),
        torch_op.concrete(start_index),
    )
    return torch_op.Target(*found)


def _compiled_rope(  # noqa: PLR0917 - Dynamo passes the arguments as they are
    head_dim: int,
    dtype: Any,
    name: str,
    rotary_dim: int | None,
    base: float,
    interleaved: bool,
    scaling: Mapping[str, Any] | RopeScaling | None,
    max_position_embeddings: int | None,
    start_index: int,
) -> tuple[int, int, bool, int]:
    """The op target of the cached RoPE for these settings, which it pins in :data:`_pinned`.

    Dynamo runs this for real when it traces a call, and takes the result (plain
    constants) into the compiled code, rather than tracing the cache and its lock.
    """
    import torch

    rope = _rope_for_input(
        # The head width is all that the settings' checks read of the input.
        torch.empty((head_dim,), dtype=dtype, device="meta"),
        name,
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    with _lock:
        _pinned[rope._op_target.key] = rope
    return tuple(rope._op_target)  # type: ignore[return-value]


# What torch._dynamo.assume_constant_result marks, set without importing torch.
_compiled_rope._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _keep_within_bounds() -> None:
    """Keep the cache within its bounds once a call may have built tables."""
    global _measured  # noqa: PLW0603 - the table generation last measured
    generation = _tables.generation()
    if generation == _measured and len(_ropes) <= CACHE_ENTRIES:
        return
    with _lock:
        _measured = generation
        sizes = {settings: held.cache_nbytes for settings, held in _ropes.items()}
        total = sum(sizes.values())
        for settings in list(_ropes)[:-1]:
            if total <= CACHE_BYTES and len(_ropes) <= CACHE_ENTRIES:
                break
            evicted = _ropes.pop(settings)
            total -= sizes[settings]
            # Its remembered plans refer back to its tables (a reference cycle): dropped
            # as it is, it would keep them until the cyclic garbage collector runs,
            # hundreds of calls later (GBs with many head dims). Freed now, the bound on
            # the bytes holds for the memory too.
            evicted.clear_cache()


def rotate(
    x: Array,
    positions: object = None,
    *,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    interleaved: bool = False,
    layout: str = "bshd",
    inverse: bool = False,
    inplace: bool = False,
    impl: str = "auto",
    xp: Namespace | None = None,
    scaling: Mapping[str, Any] | RopeScaling | None = None,
    max_position_embeddings: int | None = None,
    cu_seqlens: Array | None = None,
    start_index: int = 0,
) -> Array:
    """Apply rotary position embedding to ``x``.

    Each pair of features at position ``m`` is rotated by the angle ``m * theta_i``,
    ``theta_i = base ** (-2i / rotary_dim)``, with float64 tables and the arithmetic of
    anyrope's numerical contract, so the bits are the same on every library and device.

    Parameters
    ----------
    x : array
        Queries or keys of any array-API library, real floating dtype (float16,
        bfloat16, float32, float64); axes as given by ``layout``. A NumPy array of the
        other byte order gets the bits of its values in native order, in its own dtype;
        a NumPy masked array is refused (pass its ``.data``).
    positions : None, int, Offsets or array of int, optional
        ``None``: positions ``0 .. seq-1``. An int: that offset plus ``0 .. seq-1``
        (KV-cache decode); a 0-d integer array (traced under ``jax.jit`` too) or a NumPy
        integer scalar is the same offset, for every batch row. :class:`Offsets` of
        shape ``(batch,)``: row ``b`` at ``offsets[b] + 0 .. seq-1`` (flash-attn's
        ``seqlen_offsets``). An integer array of the caller's library, shape ``(seq,)``
        or ``(*batch, seq)``, broadcastable (left padding, packed and speculative
        positions). Any integer dtype (int8 to uint64); every position in
        ``[0, 2**53)``. The heads axis never appears in positions.
    rotary_dim : int, optional
        Rotate only ``rotary_dim`` features from ``start_index`` on (even, at most
        ``head_dim - start_index``); the rest are copied bit for bit. Defaults to the
        whole head from ``start_index`` on.
    base : float, optional
        Frequency base (``rope_theta``), finite and > 1. Default 10000.
    interleaved : bool, optional
        ``False``: half-split pairs ``(x[i], x[i + r/2])`` (Hugging Face ``rotate_half``,
        GPT-NeoX). ``True``: adjacent pairs ``(x[2i], x[2i+1])`` (Meta Llama, GPT-J).
    layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
        ``"bshd"``: ``(*batch, seq, heads, head_dim)`` (flash-attn, default);
        ``"bhsd"``: ``(*batch, heads, seq, head_dim)`` (Hugging Face);
        ``"sbhd"``: ``(seq, *batch, heads, head_dim)`` (Megatron);
        ``"thd"``: ``(total_tokens, heads, head_dim)``, packed sequences given by
        ``cu_seqlens`` (TransformerEngine's name).
    inverse : bool, optional
        Undo a rotation: rotate by the negative angle and divide by the attention
        factor ``a`` (tables ``cos/a``, ``sin/a``). Autograd's backward is the
        transpose instead (``a`` times the negative angle).
    inplace : bool, optional
        Write the result into ``x`` and return it (not possible for JAX arrays).
    impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
        ``"array_api"``: the standard-only reference. ``"numba"``: the compiled CPU
        kernel for NumPy arrays and PyTorch CPU tensors (needs numba: ``pip install -e
        '.[numba]'`` from a clone). ``"blocked"``: the cache-blocked NumPy path for the same
        inputs. ``"cuda"``: the CUDA kernel for CuPy arrays and PyTorch CUDA tensors
        (needs CuPy). ``"auto"`` (default) takes the first of ``cuda``, ``numba``,
        ``blocked`` and ``array_api`` that can take the call; all give the same bits.
        A path named here that cannot take the call raises a ``ValueError`` saying why.
    xp : namespace, optional
        The array namespace, of the library of ``x`` (``array_api_compat.torch`` for
        torch tensors); inferred from ``x`` by default. A namespace of another library
        raises ``TypeError``.
    scaling : dict or RopeScaling, optional
        Context-extension scaling, a Hugging Face ``rope_scaling`` dict (``linear``,
        ``ntk``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``; ``mrope_section`` for
        M-RoPE positions ``(3, *batch, seq)``; ``axial``, with ``axial_sections``, for
        positions ``(*batch, seq, n)`` on a grid); see :class:`RoPE` and :doc:`/scaling`.
    max_position_embeddings : int, optional
        The model's trained context, for the scaling methods that need it.
    cu_seqlens : array of int, optional
        With ``layout="thd"``: cumulative sequence lengths ``(num_sequences + 1,)`` of a
        packed input ``(total_tokens, heads, head_dim)`` (flash-attn's varlen form).
        Each sequence starts at position 0; ``positions`` then gives per-sequence
        offsets (``None``, an int, or an array ``(num_sequences,)``). The result equals
        rotating each sequence on its own, bit for bit.
    start_index : int, optional
        The first rotated feature (default 0), as rotary-embedding-torch's
        ``apply_rotary_emb(freqs, t, start_index=...)``; see :class:`RoPE`.

    Returns
    -------
    array
        Same library, device, dtype and shape as ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> x = np.random.default_rng(0).standard_normal((2, 16, 4, 64)).astype(np.float32)
    >>> y = anyrope.rotate(x)
    >>> y.shape, y.dtype
    ((2, 16, 4, 64), dtype('float32'))
    >>> bool(np.allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1)))
    True
    >>> bool(np.allclose(anyrope.rotate(y, inverse=True), x, atol=1e-6))
    True
    """
    target = _compiled_target(
        x,
        "x",
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    if target is not None:
        (y,) = torch_op.rotate(
            target,
            (x,),
            positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return y
    rope = _rope_for_input(
        x,
        "x",
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    y = rope.rotate(
        x,
        positions,
        layout=layout,
        inverse=inverse,
        inplace=inplace,
        impl=impl,
        xp=xp,
        cu_seqlens=cu_seqlens,
    )
    _keep_within_bounds()
    return y


def rotate_qk(
    q: Array,
    k: Array,
    positions: object = None,
    *,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    interleaved: bool = False,
    layout: str = "bshd",
    inverse: bool = False,
    inplace: bool = False,
    impl: str = "auto",
    xp: Namespace | None = None,
    scaling: Mapping[str, Any] | RopeScaling | None = None,
    max_position_embeddings: int | None = None,
    cu_seqlens: Array | None = None,
    start_index: int = 0,
) -> tuple[Array, Array]:
    """Apply rotary position embedding to queries and keys together.

    ``q`` and ``k`` share library, device, dtype, head_dim, batch and sequence axes;
    their head counts may differ (grouped-query and multi-query attention). The tables
    are built once for both. Every argument means what it means in :func:`rotate`.

    Parameters
    ----------
    q, k : array
        Queries and keys of one array-API library, real floating dtype (float16,
        bfloat16, float32, float64); axes as given by ``layout``.
    positions : None, int, Offsets or array of int, optional
        ``None``: ``0 .. seq-1``; an int or a 0-d integer array: that offset plus
        ``0 .. seq-1``; per-row :class:`Offsets`; an integer array of one axis or more
        broadcastable to ``(*batch, seq)``. See :func:`rotate`.
    rotary_dim : int, optional
        Rotate only ``rotary_dim`` features from ``start_index`` on; the whole head by
        default.
    base : float, optional
        Frequency base (``rope_theta``), finite and > 1. Default 10000.
    interleaved : bool, optional
        ``False``: half-split pairs (Hugging Face); ``True``: adjacent pairs (Meta, GPT-J).
    layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
        Where the batch, sequence and heads axes are; see :func:`rotate`.
    inverse : bool, optional
        Undo a rotation: rotate by the negative angle and divide by the attention
        factor ``a`` (tables ``cos/a``, ``sin/a``). Autograd's backward is the
        transpose instead (``a`` times the negative angle).
    inplace : bool, optional
        Write the results into ``q`` and ``k`` (which must not share memory).
    impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
        The path; ``"auto"`` takes the first that can take the call.
    xp : namespace, optional
        The array namespace; inferred from ``q`` and ``k`` by default.
    scaling : dict or RopeScaling, optional
        Context-extension scaling, a Hugging Face ``rope_scaling`` dict.
    max_position_embeddings : int, optional
        The model's trained context, for the scaling methods that need it.
    cu_seqlens : array of int, optional
        With ``layout="thd"``: cumulative lengths of the packed sequences.
    start_index : int, optional
        The first rotated feature (default 0); see :func:`rotate`.

    Returns
    -------
    q2, k2 : arrays
        Like ``q`` and ``k``.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> rng = np.random.default_rng(0)
    >>> q = rng.standard_normal((1, 8, 4, 32))
    >>> k = rng.standard_normal((1, 8, 1, 32))
    >>> q2, k2 = anyrope.rotate_qk(q, k, positions=np.arange(100, 108))
    >>> # scores depend only on the distance between positions
    >>> q3, k3 = anyrope.rotate_qk(q, k, positions=np.arange(7, 15))
    >>> s2 = q2[0, 5, 0] @ k2[0, 2, 0]
    >>> s3 = q3[0, 5, 0] @ k3[0, 2, 0]
    >>> bool(np.isclose(s2, s3))
    True
    """
    if not hasattr(q, "shape") or not hasattr(k, "shape"):
        namespace_of(q, k, argument=("q", "k"))
    target = _compiled_target(
        q,
        "q",
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    if target is not None:
        q2, k2 = torch_op.rotate(
            target,
            (q, k),
            positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return q2, k2
    rope = _rope_for_input(
        q,
        "q",
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    q2, k2 = rope(
        q,
        k,
        positions,
        layout=layout,
        inverse=inverse,
        inplace=inplace,
        impl=impl,
        xp=xp,
        cu_seqlens=cu_seqlens,
    )
    _keep_within_bounds()
    return q2, k2


def rotate_qkv(
    qkv: Array,
    positions: object = None,
    *,
    num_heads_q: int | None = None,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    interleaved: bool = False,
    layout: str = "bshd",
    inverse: bool = False,
    inplace: bool = False,
    impl: str = "auto",
    xp: Namespace | None = None,
    scaling: Mapping[str, Any] | RopeScaling | None = None,
    max_position_embeddings: int | None = None,
    cu_seqlens: Array | None = None,
    start_index: int = 0,
) -> Array:
    """Rotate the queries and keys of one fused qkv array; the values are not touched.

    flash-attn's ``apply_rotary_emb_qkv_``: ``qkv`` is ``(batch, seq, 3, heads,
    head_dim)`` (an axis of length 3 right before the heads axis of ``layout``), or,
    with ``num_heads_q``, ``(batch, seq, num_heads_q + 2 * num_heads_kv, head_dim)``.
    See :meth:`RoPE.rotate_qkv`; every other argument means what it means in
    :func:`rotate`.

    Parameters
    ----------
    qkv : array
        The fused queries, keys and values, real floating dtype.
    positions : None, int, Offsets or array of int, optional
        As for :func:`rotate`.
    num_heads_q : int, optional
        The number of query heads of a grouped array; ``None`` for a stacked one.
    rotary_dim : int, optional
        Rotate only ``rotary_dim`` features from ``start_index`` on.
    base : float, optional
        Frequency base (``rope_theta``), finite and > 1. Default 10000.
    interleaved : bool, optional
        ``False``: half-split pairs (Hugging Face); ``True``: adjacent pairs (Meta, GPT-J).
    layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
        The layout of q, k and v once split.
    inverse : bool, optional
        Undo a rotation: rotate by the negative angle and divide by the attention
        factor ``a`` (tables ``cos/a``, ``sin/a``). Autograd's backward is the
        transpose instead (``a`` times the negative angle).
    inplace : bool, optional
        Write rotated q and k into ``qkv`` and return it.
    impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
        The path; ``"auto"`` takes the first that can take the call.
    xp : namespace, optional
        The array namespace; inferred from ``qkv`` by default.
    scaling : dict or RopeScaling, optional
        Context-extension scaling, a Hugging Face ``rope_scaling`` dict.
    max_position_embeddings : int, optional
        The model's trained context, for the scaling methods that need it.
    cu_seqlens : array of int, optional
        With ``layout="thd"``: cumulative lengths of the packed sequences.
    start_index : int, optional
        The first rotated feature (default 0).

    Returns
    -------
    array
        Same library, device, dtype and shape as ``qkv``.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> qkv = np.random.default_rng(0).standard_normal((1, 6, 3, 4, 32))
    >>> out = anyrope.rotate_qkv(qkv, positions=anyrope.Offsets(np.array([10])))
    >>> q2, k2 = anyrope.rotate_qk(qkv[:, :, 0], qkv[:, :, 1], positions=10)
    >>> bool((out[:, :, 1] == k2).all() and (out[:, :, 2] == qkv[:, :, 2]).all())
    True
    """
    target = _compiled_target(
        qkv,
        "qkv",
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    if target is not None:
        return torch_op.rotate_qkv(
            target,
            qkv,
            positions,
            num_heads_q=num_heads_q,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
    rope = _rope_for_input(
        qkv,
        "qkv",
        rotary_dim,
        base,
        interleaved,
        scaling=scaling,
        max_position_embeddings=max_position_embeddings,
        start_index=start_index,
    )
    y = rope.rotate_qkv(
        qkv,
        positions,
        num_heads_q=num_heads_q,
        layout=layout,
        inverse=inverse,
        inplace=inplace,
        impl=impl,
        xp=xp,
        cu_seqlens=cu_seqlens,
    )
    _keep_within_bounds()
    return y
