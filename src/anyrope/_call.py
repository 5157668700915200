"""One call of a rotation as a record, checked once where a public function receives it.

:func:`make_call` is where the options of ``rotate`` / ``rotate_qk`` / ``rotate_qkv`` /
``RoPE.__call__`` / ``XPos`` are checked; the :class:`Call` it returns goes down whole to
the pipeline (:func:`anyrope._pipeline.rotate`), the plan, the torch custom op and the
dask blocks. What only the arrays can tell (shapes, dtypes, devices, positions) is
checked by :func:`anyrope._plan.make_plan`.

The parameters that several public functions take are documented once, in the section
below, and :func:`shared_docs` writes them into the docstring of each function that takes
them (:data:`SHARED`).

Shared parameters
-----------------
positions : None, int, Offsets or array of int, optional
    ``None``: positions ``0 .. seq-1``. An int: that offset plus ``0 .. seq-1``
    (KV-cache decode); a 0-d integer array (traced under ``jax.jit`` too) or a NumPy
    integer scalar is the same offset, for every batch row. :class:`~anyrope.Offsets` of
    shape ``(batch,)``: row ``b`` at ``offsets[b] + 0 .. seq-1`` (flash-attn's
    ``seqlen_offsets``). An integer array of the caller's library, shape ``(seq,)`` or
    ``(*batch, seq)``, broadcastable (left padding, packed and speculative positions).
    Any integer dtype (int8 to uint64); every position in ``[0, 2**53)``. The heads
    axis never appears in positions. M-RoPE takes ``(3, *batch, seq)``, axial RoPE
    ``(*batch, seq, n)`` (see :doc:`/scaling`).

layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
    ``"bshd"``: ``(*batch, seq, heads, head_dim)`` (flash-attn, default);
    ``"bhsd"``: ``(*batch, heads, seq, head_dim)`` (Hugging Face);
    ``"sbhd"``: ``(seq, *batch, heads, head_dim)`` (Megatron);
    ``"thd"``: ``(total_tokens, heads, head_dim)``, packed sequences given by
    ``cu_seqlens`` (TransformerEngine's name). A fused ``qkv`` has this layout once split.

inverse : bool, optional
    Undo a rotation: rotate by the negative angle and divide by the attention factor
    ``a`` (tables ``cos/a``, ``sin/a``); :class:`~anyrope.XPos` divides queries by
    their amplitude and multiplies keys by it. Autograd's backward is the transpose
    instead (``a`` times the negative angle).

inplace : bool, optional
    Write the results into the given arrays and return them (q and k must not share
    memory; a fused ``qkv`` gets its rotated q and k, its values untouched). Not
    possible for JAX and dask arrays, which are immutable.

impl : {"auto", "cuda", "numba", "blocked", "jax", "array_api"}, optional
    ``"array_api"``: the standard-only reference. ``"numba"``: the compiled CPU kernel
    for NumPy arrays and PyTorch CPU tensors (needs numba: ``pip install -e
    '.[numba]'`` from a clone). ``"blocked"``: the cache-blocked NumPy path for the same
    inputs. ``"cuda"``: the CUDA kernel for CuPy arrays and PyTorch CUDA tensors (needs
    CuPy). ``"jax"``: that numba kernel called by XLA, for JAX arrays on the CPU inside
    ``jax.jit``, ``vmap`` or ``grad`` (eager JAX arrays on the CPU go the NumPy way).
    ``"auto"`` (default) takes the first of ``cuda``, ``numba``, ``blocked``, ``jax``
    and ``array_api`` that can take the call. All give the same bits, but where a
    compiler wrapped around the call rewrites the reference's arithmetic
    (``impl="array_api"`` under ``jax.jit``: see :doc:`/numerical-contract`). A path
    named here that cannot take the call raises a ``ValueError`` saying why.

xp : namespace, optional
    The array namespace, of the library of the arrays (``array_api_compat.torch`` for
    torch tensors); inferred from them by default. A namespace of another library
    raises ``TypeError``.

cu_seqlens : array of int, optional
    With ``layout="thd"``: cumulative sequence lengths ``(num_sequences + 1,)`` of a
    packed input ``(total_tokens, heads, head_dim)`` (flash-attn's varlen form). Each
    sequence starts at position 0; ``positions`` then gives per-sequence offsets
    (``None``, an int, or an array ``(num_sequences,)``). The result equals rotating
    each sequence on its own, bit for bit.

rotary_dim : int, optional
    Number of features that rotate, from ``start_index`` on; the rest are copied bit for
    bit. Positive, even and at most ``head_dim - start_index``. Defaults to
    ``head_dim - start_index``.

base : float, optional
    Base of the frequencies ``theta_i = base ** (-2i / rotary_dim)`` (``rope_theta`` in
    Hugging Face configs). Finite and greater than 1. Default 10000.

interleaved : bool, optional
    ``False`` (default): pairs are ``(x[i], x[i + rotary_dim/2])``, the half-split
    layout of Hugging Face's ``rotate_half``, GPT-NeoX and flash-attn. ``True``: pairs
    are ``(x[2i], x[2i+1])``, the layout of Meta's complex form, GPT-J and
    rotary-embedding-torch.

scaling : dict or RopeScaling, optional
    Context-extension scaling as in a Hugging Face ``rope_scaling`` /
    ``rope_parameters`` dict (``rope_type`` or ``type``: ``default``, ``linear``,
    ``ntk``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``; ``mrope_section`` for
    M-RoPE; ``axial`` for image patches, with ``axial_sections`` for ``n``-D grids such
    as video), or a :class:`anyrope.RopeScaling`. See :doc:`/scaling`.

max_position_embeddings : int, optional
    The model's trained context ``L_max`` (needed by ``dynamic``; the default
    ``original_max_position_embeddings`` of ``yarn``, ``llama3`` and ``longrope``).

start_index : int, optional
    The first rotated feature (default 0): features ``start_index`` to
    ``start_index + rotary_dim - 1`` rotate, as in rotary-embedding-torch's
    ``apply_rotary_emb(freqs, t, start_index=...)``; those before and after are copied
    bit for bit.

max_positions : int, optional
    The capacity: build the tables for positions ``0 .. max_positions - 1`` at the
    first call on each device, never to move or shrink, and leave position arrays on a
    GPU, or that the host cannot read (traced, lazy, captured), unread: their rows are
    gathered inside the graph, the call never waits for the device (it can be captured
    in a CUDA graph), and a position outside the tables gives NaN in the rotated
    features of its token. Without it, GPU arrays are read on the host (a device
    synchronisation) and an out-of-range position raises ``ValueError``. For
    ``dynamic`` and ``longrope`` scaling the largest position chooses the frequencies,
    so their arrays are always read. See :doc:`/inside-graphs`.
"""

from __future__ import annotations

import inspect
import re
from typing import NamedTuple, TypeVar

from ._namespace import Array, Namespace
from ._validation import check_bool


class Call(NamedTuple):
    """The arrays of one call and its options, checked by :func:`make_call`.

    A named tuple rather than a dataclass: a decode step builds one per call, and a
    tuple is built in a fraction of the time. ``adjoint`` (autograd's backward, never a
    user's option) asks for the transpose of the rotation ``inverse`` asks for.
    """

    arrays: tuple[Array, ...]
    names: tuple[str, ...]
    positions: object
    cu_seqlens: Array | None
    layout: str
    inverse: bool
    inplace: bool
    impl: str
    xp: Namespace | None
    adjoint: bool = False

    def on(self, arrays: tuple[Array, ...], names: tuple[str, ...] | None = None) -> Call:
        """This call on other arrays (views of the caller's, or blocks): ``_replace``,
        in a fraction of its time (the fused qkv calls pay it at every decode step)."""
        return tuple.__new__(Call, (arrays, self.names if names is None else names, *self[2:]))


def make_call(  # noqa: PLR0917 - the options in the order of the public signatures
    arrays: tuple[Array, ...],
    names: tuple[str, ...],
    positions: object,
    layout: str,
    inverse: object,
    inplace: object,
    impl: str,
    xp: Namespace | None,
    cu_seqlens: Array | None,
) -> Call:
    """The checked :class:`Call` of these arguments (the flags must be bools: a cached plan
    would take 1 for True; ``cu_seqlens`` needs ``layout="thd"``).

    The options come in the order of the public signatures, which pass them by position.
    """
    # Identity tests first: a decode step pays two comparisons, not two calls.
    if inverse is not True and inverse is not False:
        check_bool(inverse, "inverse")
    if inplace is not True and inplace is not False:
        check_bool(inplace, "inplace")
    if cu_seqlens is not None and layout != "thd":
        raise ValueError(f"`cu_seqlens` needs layout='thd'; got layout={layout!r}")
    # tuple.__new__ directly: the named tuple's own __new__ is a Python function more.
    return tuple.__new__(
        Call, (arrays, names, positions, cu_seqlens, layout, inverse, inplace, impl, xp, False)
    )


def _entries(doc: str | None) -> dict[str, str]:
    """The entries of the section "Shared parameters" of ``doc`` by name (none under -OO)."""
    if doc is None:
        return {}
    section = doc.split("-----------------\n", 1)[1].strip()
    return {entry.split(" : ")[0]: entry.strip() for entry in re.split(r"\n(?=\w)", section)}


#: The entries of the shared parameters, by name, read from this module's docstring.
SHARED = _entries(__doc__)

_Documented = TypeVar("_Documented")


def shared_docs(documented: _Documented) -> _Documented:
    """Write the entries of :data:`SHARED` into the docstring of a function or class.

    The line ``{shared}`` in its Parameters section becomes one entry for each parameter
    of its signature (the ``__init__`` of a class) that :data:`SHARED` documents and the
    entries above the line do not, in the signature's order: every page shows them all.
    """
    doc = documented.__doc__
    if doc is None:  # python -OO
        return documented
    marker = re.search(r"^( *)\{shared\}\n", doc, re.MULTILINE)
    assert marker is not None, f"{documented!r} has no {{shared}} line"
    # Its own entries come first, between the Parameters heading and the line.
    own = {
        name.strip()
        for names in re.findall(
            r"^ *([\w, ]+) : ", doc[doc.find("Parameters") : marker.start()], re.MULTILINE
        )
        for name in names.split(",")
    }
    indent = marker.group(1)
    entries = [
        re.sub("^", indent, SHARED[name], flags=re.MULTILINE) + "\n"
        for name in inspect.signature(documented).parameters  # type: ignore[arg-type]
        if name in SHARED and name not in own
    ]
    documented.__doc__ = doc[: marker.start()] + "".join(entries) + doc[marker.end() :]
    return documented
