"""The functional API: each call is one of the :class:`RoPE` of its settings, kept in a cache.

The cache holds at most :data:`CACHE_ENTRIES` RoPEs and :data:`CACHE_BYTES` of tables.
"""

from __future__ import annotations

import contextlib
import operator
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from . import _tables, _threads
from . import _torch_op as torch_op
from ._call import Call, make_call, shared_docs
from ._namespace import Array, Namespace, namespace_of
from ._rope import RoPE
from ._validation import describe
from .scaling import RopeScaling, parse_rope_scaling

#: Bytes of cos/sin tables that :func:`rotate` and :func:`rotate_qk` keep between calls, over all
#: the settings they have seen; the least recently used settings go first.
CACHE_BYTES = 256 * 2**20

#: Settings (head_dim, rotary_dim, base, interleaved, scaling) kept at most.
CACHE_ENTRIES = 64

#: The RoPE of each setting, by the arguments as given (with their types, so that 1 is not True: a
#: call repeating known settings skips their checks, which they passed the first time), least
#: recently used first.
_ropes: OrderedDict[tuple[Any, ...], RoPE] = OrderedDict()
#: The RoPEs that code compiled by torch.compile calls, by their op key: kept for the life of the
#: process (the compiled code names their tables by key), their tables freed by clear_cache.
_pinned: dict[int, RoPE] = {}
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
        for rope in _pinned.values():
            rope.clear_cache()


def cache_nbytes() -> int:
    """Return the bytes of cos/sin tables the functional API keeps now.

    A :class:`RoPE` you hold counts its own with :meth:`RoPE.cache_nbytes`. Both count
    every library, device and dtype the tables were built for; :func:`clear_cache` and
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
        held = {rope._op_keys[0]: rope for rope in _ropes.values()} | _pinned
        return sum(rope.cache_nbytes() for rope in held.values())


# The keywords of RoPE that a functional call passes, in the order of its settings.
_NAMES = ("rotary_dim", "base", "interleaved", "max_position_embeddings", "start_index", "scaling")


def _rope(x: Array, name: str, settings: tuple[Any, ...]) -> RoPE:
    """The cached :class:`RoPE` of ``settings`` (the arguments :data:`_NAMES`) for an
    input whose last axis is the head dimension."""
    shape = getattr(x, "shape", None)
    head_dim = int(shape[-1]) if shape else 0
    if isinstance(settings[-1], Mapping):  # a dict may change after the call: parsed each time
        scaling = parse_rope_scaling(settings[-1], max_position_embeddings=settings[3])
        settings = (*settings[:-1], scaling)
    key = (head_dim, *settings, *map(type, settings))
    try:
        rope = _ropes.get(key)
    except TypeError:  # an unhashable argument: RoPE() names it
        key, rope = (), None
    if rope is not None:
        with contextlib.suppress(KeyError):  # evicted by another thread meanwhile
            _ropes.move_to_end(key)
        return rope
    namespace_of(x, argument=name)
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(
            f"the last axis of `{name}` (head_dim) must have a positive even length; "
            f"got {describe(x)}"
        )
    rope = RoPE(head_dim, **dict(zip(_NAMES, settings, strict=True)))
    if key:
        with _lock:
            rope = _ropes.setdefault(key, rope)
    return rope


def _compiled_rope(head_dim: int, dtype: Any, name: str, *settings: Any) -> tuple[Any, ...]:
    """The op key and geometry of the cached RoPE of these settings, which it pins in
    :data:`_pinned`.

    Dynamo runs this for real when it traces a call, and takes the result (plain
    constants) into the compiled code, rather than tracing the cache and its lock.
    """
    import torch

    # The head width is all that the settings' checks read of the input.
    rope = _rope(torch.empty((head_dim,), dtype=dtype, device="meta"), name, settings)
    with _lock:
        _pinned[rope._op_keys[0]] = rope
    return rope._op_keys[0], rope.head_dim, rope.interleaved, rope.start_index


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
        sizes = {settings: held.cache_nbytes() for settings, held in _ropes.items()}
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


def _rotate(call: Call, settings: tuple[Any, ...], num_heads_q: int | None = None) -> Any:
    """Rotate the arrays of ``call`` (x, q and k, or a fused qkv) with the RoPE of
    ``settings``: a tuple of arrays, one array for a fused qkv."""
    qkv, x = call.names == ("qkv",), call.arrays[0]
    if torch_op.compiling(x):  # torch.compile traces the call: one op (see _compiled_rope)
        # operator.index: Dynamo specializes a symbolic head width (dynamic shapes) to the
        # constant it is, guarded, which int() would leave symbolic.
        head_dim = operator.index(x.shape[-1]) if x.ndim else 0
        # With dynamic=True, Dynamo makes numbers symbolic (defaults such as `base` too).
        settings = (*map(torch_op.concrete, settings[:-1]), settings[-1])
        key, *geometry = _compiled_rope(head_dim, x.dtype, call.names[0], *settings)
        target = torch_op.Target((key,), *geometry)  # one key: the source of every array
        return (
            torch_op.rotate_qkv(target, call, num_heads_q) if qkv else torch_op.rotate(target, call)
        )
    rope = _rope(x, call.names[0], settings)
    if qkv:
        rotated = rope._rotate_qkv(call, num_heads_q)
    else:
        rotated = rope._rotate(call, slice(0, len(call.arrays)))
    _keep_within_bounds()
    return rotated


@shared_docs
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
    The rotation is that of the :class:`RoPE` of these settings, which is kept between
    calls (see :func:`clear_cache`).

    Parameters
    ----------
    x : array
        Queries or keys of any array-API library, real floating dtype (float16,
        bfloat16, float32, float64); axes as given by ``layout``. A NumPy array of the
        other byte order gets the bits of its values in native order, in its own dtype;
        a NumPy masked array is refused (pass its ``.data``).
    {shared}

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
    call = make_call((x,), ("x",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
    settings = (rotary_dim, base, interleaved, max_position_embeddings, start_index, scaling)
    (y,) = _rotate(call, settings)
    return y


@shared_docs
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
    {shared}

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
    call = make_call((q, k), ("q", "k"), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
    settings = (rotary_dim, base, interleaved, max_position_embeddings, start_index, scaling)
    q2, k2 = _rotate(call, settings)
    return q2, k2


@shared_docs
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
    num_heads_q : int, optional
        The number of query heads of a grouped array; ``None`` for a stacked one.
    {shared}

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
    call = make_call((qkv,), ("qkv",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
    settings = (rotary_dim, base, interleaved, max_position_embeddings, start_index, scaling)
    return _rotate(call, settings, num_heads_q)
