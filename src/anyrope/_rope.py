"""The :class:`RoPE` object: frequencies fixed once, tables cached per library, device and dtype."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import array_api_compat
import numpy as np

from . import _mrope, _pipeline, _slices
from . import _torch_op as torch_op
from ._jax import is_traced
from ._namespace import (
    Array,
    Namespace,
    check_namespace,
    device_of,
    is_real_floating,
    library_name,
    namespace_of,
    to_host,
)
from ._qkv import join_qkv, joint_qk, split_qkv
from ._validation import (
    MAX_POSITION,
    check_base,
    check_bool,
    check_head_dim,
    check_int,
    check_rotary_dim,
)
from .scaling import RopeScaling, from_hf_config, parse_rope_scaling
from .scaling._types import FloatArray
from .scaling.hf import from_hf_config_layers


class RoPE:
    """Rotary position embedding for heads of width ``head_dim``.

    Holds the frequencies (float64, on the host) and caches cos/sin tables for each
    (array library, device, dtype) it meets, growing them when a larger position
    arrives. One instance may be shared by several threads, pickled (without its
    tables, which are rebuilt with the same bits where it is unpickled) and deep-copied.

    Parameters
    ----------
    head_dim : int
        Width of each attention head (the last axis of q and k); positive and even.
    rotary_dim : int, optional
        Number of features that rotate, from ``start_index`` on; the rest are copied
        bit for bit. Positive, even and at most ``head_dim - start_index``. Defaults to
        ``head_dim - start_index``.
    base : float, optional
        Base of the frequencies ``theta_i = base ** (-2i / rotary_dim)`` (``rope_theta``
        in Hugging Face configs). Finite and greater than 1. Default 10000.
    interleaved : bool, optional
        ``False`` (default): pairs are ``(x[i], x[i + rotary_dim/2])``, the half-split
        layout of Hugging Face's ``rotate_half`` and GPT-NeoX. ``True``: pairs are
        ``(x[2i], x[2i+1])``, the layout of Meta's complex form and GPT-J.
    scaling : dict or RopeScaling, optional
        Context-extension scaling as in a Hugging Face ``rope_scaling`` /
        ``rope_parameters`` dict (``rope_type`` or ``type``: ``default``, ``linear``,
        ``ntk``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``; ``mrope_section`` for
        M-RoPE; ``axial`` for image patches, with ``axial_sections`` for ``n``-D grids such
        as video), or a :class:`anyrope.RopeScaling`.
        See :doc:`/scaling`.
    max_position_embeddings : int, optional
        The model's trained context ``L_max`` (needed by ``dynamic``; the default
        ``original_max_position_embeddings`` of ``yarn``, ``llama3`` and ``longrope``).
    start_index : int, optional
        The first rotated feature (default 0): features ``start_index`` to
        ``start_index + rotary_dim - 1`` rotate, as in rotary-embedding-torch's
        ``apply_rotary_emb(freqs, t, start_index=...)``; those before and after are
        copied bit for bit.
    max_positions : int, optional
        Build the tables for positions ``0 .. max_positions - 1`` at the first call on
        each device, and let the CUDA path leave position arrays on the GPU unread:
        the call then never waits for the device (it can be captured in a CUDA graph),
        and the kernel checks each position as it reads it: a position outside the
        tables gives NaN in the rotated features of its token. Without it, such
        arrays are read on the host (a device synchronisation) and an out-of-range
        position raises ``ValueError``. For ``dynamic`` and ``longrope`` scaling the
        largest position chooses the frequencies, so their arrays are always read.
        See :doc:`/performance`.

    Attributes
    ----------
    inv_freq : numpy.ndarray
        float64 frequencies ``theta_i``, shape ``(rotary_dim // 2,)``. For ``dynamic``
        and ``longrope`` these are the ones of a sequence within the original context;
        :meth:`frequencies` gives those of any length.
    attention_factor : float
        Factor multiplied into cos and sin (1.0 without scaling).
    softmax_scale : float
        Multiplier for the attention's ``1 / sqrt(head_dim)`` that the model expects
        (DeepSeek's YaRN ``mscale(factor, mscale_all_dim) ** 2``; 1.0 otherwise).
    scaling : RopeScaling
        The parsed scaling description.
    sections : tuple of int or None
        Pairs per position stream for M-RoPE and axial RoPE (one per axis), else ``None``.
    axial : bool
        Whether this is axial RoPE (``rope_type="axial"``): positions ``(..., n)``, one
        coordinate per axis, ``n = len(sections)`` (2 without ``axial_sections``).

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> rope = anyrope.RoPE(64)
    >>> q = np.ones((1, 5, 8, 64), dtype=np.float32)   # (batch, seq, heads, head_dim)
    >>> k = np.ones((1, 5, 2, 64), dtype=np.float32)   # fewer key heads (GQA)
    >>> q2, k2 = rope(q, k)
    >>> q2.shape, k2.shape
    ((1, 5, 8, 64), (1, 5, 2, 64))
    >>> bool(np.all(q2[0, 0] == q[0, 0]))               # position 0 is not rotated
    True
    """

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        interleaved: bool = False,
        scaling: Mapping[str, Any] | RopeScaling | None = None,
        max_position_embeddings: int | None = None,
        start_index: int = 0,
        max_positions: int | None = None,
    ) -> None:
        self.head_dim = check_head_dim(head_dim)
        self.start_index = check_int(start_index, "start_index")
        if not 0 <= self.start_index < self.head_dim:
            raise ValueError(
                f"`start_index` must be at least 0 and below head_dim={self.head_dim}; "
                f"got {self.start_index}"
            )
        width = self.head_dim - self.start_index
        self.rotary_dim = width if rotary_dim is None else check_rotary_dim(rotary_dim, head_dim)
        if self.rotary_dim > width:
            raise ValueError(
                f"`rotary_dim`={self.rotary_dim} features from `start_index`={self.start_index} "
                f"end past head_dim={self.head_dim}"
            )
        self.base = check_base(base)
        self.interleaved = check_bool(interleaved, "interleaved")
        if max_position_embeddings is not None:
            check_int(max_position_embeddings, "max_position_embeddings")
        self.scaling = parse_rope_scaling(scaling, max_position_embeddings=max_position_embeddings)
        self._check_scaling()
        self.max_position_embeddings = self.scaling.max_position_embeddings
        self.softmax_scale = self.scaling.softmax_scale
        self.axial = self.scaling.rope_type == "axial"
        self.sections = self.scaling.sections(self.rotary_dim)
        self.max_positions = None
        if max_positions is not None:
            self.max_positions = check_int(max_positions, "max_positions")
            if not 0 < self.max_positions <= MAX_POSITION:
                raise ValueError(
                    f"`max_positions` must be at least 1 and at most 2**53; got {max_positions}"
                )
        # The key names the table source to the torch custom op that torch.compile traces.
        self._source, key = torch_op.table_source(
            self.scaling, self.rotary_dim, self.base, self.max_positions
        )
        self._op_target = torch_op.Target(key, self.head_dim, self.interleaved, self.start_index)
        self.inv_freq = self._source.default.inv_freq
        self.attention_factor = self._source.default.attention_factor

    def _check_scaling(self) -> None:
        scaling = self.scaling
        if scaling.rope_theta is not None and scaling.rope_theta != self.base:
            raise ValueError(
                f"`scaling` has rope_theta={scaling.rope_theta!r} but `base`={self.base!r}; "
                f"pass base={scaling.rope_theta!r}"
            )
        fraction = scaling.partial_rotary_factor
        if not scaling.partial_rotary_factor_sets_width:
            if self.rotary_dim != self.head_dim - self.start_index:
                raise ValueError(
                    f"rope_type={scaling.rope_type!r} rotates the whole head (its "
                    "partial_rotary_factor chooses how many pairs turn); got "
                    f"`rotary_dim`={self.rotary_dim} for head_dim={self.head_dim}"
                )
            fraction = None
        if fraction is not None and int(self.head_dim * fraction) != self.rotary_dim:
            raise ValueError(
                f"`scaling` has partial_rotary_factor={fraction!r}, which gives rotary_dim="
                f"{int(self.head_dim * fraction)} for head_dim={self.head_dim}; got "
                f"`rotary_dim`={self.rotary_dim}"
            )
        scaling.check_rotary_dim(self.rotary_dim)

    @classmethod
    def from_hf_config(
        cls, config: Any, *, layer_type: str | None = None, max_positions: int | None = None
    ) -> RoPE:
        """Build the RoPE of a Hugging Face model from its ``config.json`` (dict or object).

        Reads ``rope_theta``, ``head_dim`` (or ``hidden_size // num_attention_heads``,
        or DeepSeek's ``qk_rope_head_dim``), ``partial_rotary_factor`` / ``rotary_pct``,
        ``max_position_embeddings``, ``original_max_position_embeddings`` and
        ``rope_scaling`` / ``rope_parameters``; see :func:`anyrope.scaling.from_hf_config`.
        A transformers ``PretrainedConfig`` works too (anyrope never imports transformers).

        The pairing comes from the family (``model_type``: Cohere, GLM, ERNIE 4.5, Llama 4,
        DeepSeek and others pair ``(x[2i], x[2i+1])``; ``rope_interleave`` decides where a
        config has it). Configs with settings per layer type (Gemma 3, ModernBERT, OLMo 3,
        ...) need ``layer_type``; :meth:`from_hf_config_layers` gives them all. A family
        whose rotation anyrope does not model, or a key it does not use, is an error
        that names it: never a silently different rotation.

        Parameters
        ----------
        config : Mapping or object
            The model's ``config.json`` as a dict, or an object with those attributes.
        layer_type : str, optional
            The layer type whose rotation to build, for configs with settings per layer
            type (required there); see :func:`anyrope.scaling.from_hf_config`.
        max_positions : int, optional
            Tables built ahead for positions below it; see :class:`RoPE`. Not read from
            the config: a model may be run past ``max_position_embeddings``.

        Returns
        -------
        RoPE
            The rotation the model family uses, or a ``ValueError`` naming what differs.

        Examples
        --------
        >>> import anyrope
        >>> llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        ...           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        >>> rope = anyrope.RoPE.from_hf_config({
        ...     "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
        ...     "max_position_embeddings": 131072, "rope_scaling": llama3})
        >>> rope.head_dim, rope.base, rope.scaling.rope_type
        (128, 500000.0, 'llama3')
        """
        settings = from_hf_config(config, layer_type=layer_type)
        return cls(settings.head_dim, **settings.kwargs(), max_positions=max_positions)

    @classmethod
    def from_hf_config_layers(
        cls, config: Any, *, max_positions: int | None = None
    ) -> dict[str, RoPE | None]:
        """Build the RoPE of every layer type of a Hugging Face model config.

        For a config with settings per layer type (Gemma 3's ``"full_attention"`` and
        ``"sliding_attention"``), one :class:`RoPE` per type, ``None`` for a type without
        RoPE (``null`` settings); for a config with one set of settings, the same
        :class:`RoPE` for each of its ``layer_types`` (or under ``"default"`` when it
        lists none). Layer ``i`` of the model uses ``ropes[config.layer_types[i]]``.

        Parameters
        ----------
        config : Mapping or object
            The model's ``config.json`` as a dict, or an object with those attributes.
        max_positions : int, optional
            Tables built ahead for positions below it, for every layer type; see
            :class:`RoPE`.

        Returns
        -------
        dict
            Layer type -> :class:`RoPE` (or ``None``).

        Examples
        --------
        >>> import anyrope
        >>> config = {"head_dim": 256, "max_position_embeddings": 131072,
        ...           "rope_parameters": {
        ...               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        ...               "full_attention": {"rope_type": "linear", "factor": 8.0,
        ...                                  "rope_theta": 1000000.0}}}
        >>> ropes = anyrope.RoPE.from_hf_config_layers(config)
        >>> {name: (rope.base, rope.scaling.rope_type) for name, rope in ropes.items()}
        {'sliding_attention': (10000.0, 'default'), 'full_attention': (1000000.0, 'linear')}
        """
        ropes: dict[str, RoPE | None] = {}
        made: dict[Any, RoPE] = {}
        for name, settings in from_hf_config_layers(config).items():
            if settings is None:
                ropes[name] = None
                continue
            # Layer types with the same settings share one RoPE (and its tables).
            if settings not in made:
                made[settings] = cls(
                    settings.head_dim, **settings.kwargs(), max_positions=max_positions
                )
            ropes[name] = made[settings]
        return ropes

    def frequencies(self, seq_len: int | None = None) -> tuple[FloatArray, float]:
        """Return ``(inv_freq, attention_factor)`` for a sequence of ``seq_len`` positions.

        Only ``dynamic`` and ``longrope`` scaling depend on the length; ``None`` means a
        sequence within the original context.

        Parameters
        ----------
        seq_len : int, optional
            One more than the largest position of the sequence.

        Returns
        -------
        inv_freq : numpy.ndarray
            The frequencies: float64, read-only, shape ``(rotary_dim // 2,)``.
        attention_factor : float
            The factor multiplied into cos and sin.

        Examples
        --------
        >>> import anyrope
        >>> rope = anyrope.RoPE(8, scaling={"rope_type": "dynamic", "factor": 2.0},
        ...                     max_position_embeddings=100)
        >>> bool((rope.frequencies(100)[0] == rope.inv_freq).all())
        True
        >>> bool(rope.frequencies(150)[0][-1] < rope.inv_freq[-1])
        True
        """
        return self._source.frequencies(seq_len)

    @property
    def cache_nbytes(self) -> int:
        """Number of bytes held by this RoPE's cached cos/sin tables.

        Every library, device and dtype the tables were built for counts; see
        :meth:`clear_cache`. A property, read without a call, like the RoPE's other
        attributes; the functional API's tables, which no object of yours holds, are
        counted by the function :func:`anyrope.cache_nbytes` (a module has no
        properties) and freed by :func:`anyrope.clear_cache`.

        Returns
        -------
        int
            Bytes of cos and sin tables, 0 after :meth:`clear_cache`.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> rope = anyrope.RoPE(64)
        >>> _ = rope.rotate(np.zeros((1, 10, 1, 64), dtype=np.float32), impl="array_api")
        >>> rope.cache_nbytes    # 256 positions x 32 pairs, cos and sin in float32
        65536
        >>> rope.clear_cache()
        >>> rope.cache_nbytes
        0
        """
        return self._source.nbytes

    def clear_cache(self) -> None:
        """Drop the cached cos/sin tables; they are rebuilt (the same bits) when needed."""
        self._source.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings: the frequencies are recomputed (the same bits) and
        # the tables, which live on devices, are rebuilt where they are needed.
        return (
            _restore,
            (
                type(self),
                self.head_dim,
                self.rotary_dim,
                self.base,
                self.interleaved,
                self.scaling,
                self.start_index,
                self.max_positions,
            ),
        )

    def __repr__(self) -> str:
        extra = f", start_index={self.start_index}" if self.start_index else ""
        if self.max_positions is not None:
            extra += f", max_positions={self.max_positions}"
        if self.scaling != RopeScaling(max_position_embeddings=self.max_position_embeddings):
            extra += f", scaling={self.scaling!r}"
        return (
            f"RoPE(head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
            f"base={self.base!r}, interleaved={self.interleaved}{extra})"
        )

    def __call__(
        self,
        q: Array,
        k: Array,
        positions: object = None,
        *,
        layout: str = "bshd",
        inverse: bool = False,
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> tuple[Array, Array]:
        """Rotate queries and keys with this RoPE's frequencies.

        Parameters
        ----------
        q, k : array
            Queries and keys of one array-API library, real floating dtype; their head
            counts may differ (grouped-query attention).
        positions : None, int or array of int, optional
            ``None``: ``0 .. seq-1``; an int or a 0-d integer array: that offset plus
            ``0 .. seq-1`` (KV-cache decode); an integer array of one axis or more
            broadcastable to ``(*batch, seq)``.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            Where the batch, sequence and heads axes are; see :func:`anyrope.rotate`.
        inverse : bool, optional
            Undo a rotation: rotate by the negative angle and divide by the
            attention factor ``a`` (tables ``cos/a``, ``sin/a``). Autograd's backward
            is the transpose instead (``a`` times the negative angle).
        inplace : bool, optional
            Write the results into ``q`` and ``k`` (which must not share memory).
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``q`` and ``k`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        q2, k2 : arrays
            Like ``q`` and ``k``: same library, device, dtype and shape.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> rope = anyrope.RoPE(8)
        >>> q = np.random.default_rng(0).standard_normal((2, 4, 3, 8))
        >>> k = np.random.default_rng(1).standard_normal((2, 4, 1, 8))
        >>> q2, k2 = rope(q, k, positions=10)            # KV-cache offset
        >>> q3, k3 = rope(q2, k2, positions=10, inverse=True)
        >>> bool(np.allclose(q3, q) and np.allclose(k3, k))
        True
        """
        q2, k2 = self._rotate(
            q,
            k,
            positions=positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return q2, k2

    def rotate(
        self,
        x: Array,
        positions: object = None,
        *,
        layout: str = "bshd",
        inverse: bool = False,
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> Array:
        """Rotate one array (queries or keys) with this RoPE's frequencies.

        Parameters
        ----------
        x : array
            An array of any array-API library, real floating dtype.
        positions : None, int or array of int, optional
            ``None``: ``0 .. seq-1``; an int or a 0-d integer array: that offset plus
            ``0 .. seq-1`` (KV-cache decode); an integer array of one axis or more
            broadcastable to ``(*batch, seq)``.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            Where the batch, sequence and heads axes are; see :func:`anyrope.rotate`.
        inverse : bool, optional
            Undo a rotation: rotate by the negative angle and divide by the
            attention factor ``a`` (tables ``cos/a``, ``sin/a``). Autograd's backward
            is the transpose instead (``a`` times the negative angle).
        inplace : bool, optional
            Write the result into ``x`` and return it.
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``x`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        array
            Same library, device, dtype and shape as ``x``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> x = np.zeros((3, 1, 2), dtype=np.float32)    # (seq, heads, head_dim)
        >>> x[..., 0] = 1.0
        >>> anyrope.RoPE(2).rotate(x)[:, 0, :]
        array([[ 1.        ,  0.        ],
               [ 0.5403023 ,  0.84147096],
               [-0.41614684,  0.9092974 ]], dtype=float32)
        """
        (y,) = self._rotate(
            x,
            positions=positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        return y

    def rotate_qkv(
        self,
        qkv: Array,
        positions: object = None,
        *,
        num_heads_q: int | None = None,
        layout: str = "bshd",
        inverse: bool = False,
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> Array:
        """Rotate the queries and keys of a fused qkv array; the values are not touched.

        The fused output of a qkv projection, as flash-attn's ``apply_rotary_emb_qkv_``
        takes it, in one of two forms:

        - without ``num_heads_q``: an axis of length 3 (q, k, v) right before the heads
          axis, e.g. ``(batch, seq, 3, heads, head_dim)`` for ``layout="bshd"`` or
          ``(batch, 3, heads, seq, head_dim)`` for ``"bhsd"``;
        - with ``num_heads_q``: the heads axis holds ``num_heads_q`` query heads, then the
          key heads, then as many value heads (grouped-query attention), e.g.
          ``(batch, seq, num_heads_q + 2 * num_heads_kv, head_dim)``.

        q and k are rotated as views of ``qkv``, with the bits :meth:`__call__` gives.

        Parameters
        ----------
        qkv : array
            The fused array, real floating dtype, in one of the forms above.
        positions : None, int, Offsets or array of int, optional
            As for :meth:`rotate`.
        num_heads_q : int, optional
            The number of query heads of a grouped array; ``None`` for a stacked one.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            The layout of q, k and v once split; see :func:`anyrope.rotate`.
        inverse : bool, optional
            Undo a rotation: rotate by the negative angle and divide by the
            attention factor ``a`` (tables ``cos/a``, ``sin/a``). Autograd's backward
            is the transpose instead (``a`` times the negative angle).
        inplace : bool, optional
            Write the rotated q and k into ``qkv`` and return it (flash-attn's in-place
            form); otherwise a new array holds rotated q and k and a copy of v.
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``qkv`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        array
            Same library, device, dtype and shape as ``qkv``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> rope = anyrope.RoPE(8)
        >>> qkv = np.random.default_rng(0).standard_normal((2, 4, 3, 2, 8))
        >>> out = rope.rotate_qkv(qkv, positions=7)
        >>> q2, k2 = rope(qkv[:, :, 0], qkv[:, :, 1], positions=7)
        >>> bool((out[:, :, 0] == q2).all() and (out[:, :, 2] == qkv[:, :, 2]).all())
        True
        >>> grouped = np.random.default_rng(1).standard_normal((2, 4, 4 + 2 * 1, 8))
        >>> rope.rotate_qkv(grouped, num_heads_q=4).shape   # 4 query, 1 key, 1 value head
        (2, 4, 6, 8)
        """
        if torch_op.compiling(qkv):
            return torch_op.rotate_qkv(
                self._op_target,
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
        if xp is not None:  # a namespace of another library is named for `qkv`, not its views
            namespace_of(qkv, xp=xp, argument="qkv")
        if inplace:
            qk = joint_qk(qkv, layout, num_heads_q)
            if qk is not None:
                self._rotate(
                    qk,
                    positions=positions,
                    layout=layout,
                    inverse=inverse,
                    inplace=True,
                    impl=impl,
                    xp=xp,
                    cu_seqlens=cu_seqlens,
                )
                return qkv
        fused = split_qkv(qkv, layout, num_heads_q)
        q, k = self._rotate(
            fused.q,
            fused.k,
            positions=positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )
        if inplace:
            return qkv
        return join_qkv(fused, q, k, namespace_of(qkv, xp=xp, argument="qkv"))

    def path(
        self,
        x: Array,
        positions: object = None,
        *,
        layout: str = "bshd",
        inplace: bool = False,
        impl: str = "auto",
        xp: Namespace | None = None,
        cu_seqlens: Array | None = None,
    ) -> str:
        """Name the path that :meth:`rotate` takes for these arguments.

        The arguments are checked as by :meth:`rotate` (a path named by ``impl`` that
        cannot take them raises). Eager JAX arrays on the CPU are rotated as NumPy
        arrays (``"numba"`` or ``"blocked"``); dask arrays take the path of their
        blocks' library.

        Parameters
        ----------
        x : array
            An input as :meth:`rotate` would receive it.
        positions : None, int or array of int, optional
            The positions, as for :meth:`rotate`.
        layout : {"bshd", "bhsd", "sbhd", "thd"}, optional
            Where the batch, sequence and heads axes are.
        inplace : bool, optional
            Whether the call would write into ``x``.
        impl : {"auto", "cuda", "numba", "blocked", "array_api"}, optional
            The path asked for; ``"auto"`` takes the first that can take the call.
        xp : namespace, optional
            The array namespace; inferred from ``x`` by default.
        cu_seqlens : array of int, optional
            With ``layout="thd"``: cumulative lengths of the packed sequences.

        Returns
        -------
        str
            ``"cuda"``, ``"numba"``, ``"blocked"`` or ``"array_api"``: the ``impl`` name
            of the path.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> rope = anyrope.RoPE(64)
        >>> x = np.zeros((1, 8, 4, 64), dtype=np.float32)
        >>> rope.path(x) in ("numba", "blocked")  # "numba" when numba is installed
        True
        >>> rope.path(x, impl="blocked"), rope.path(x, impl="array_api")
        ('blocked', 'array_api')
        """
        from ._pipeline import path_name

        if array_api_compat.is_dask_array(x):
            # `xp` is the dask array's; the path named is that of its blocks.
            namespace_of(x, xp=xp)
            x, xp = x._meta.reshape((0,) * (x.ndim - 1) + (x.shape[-1],)), None
        start = 0
        if self.start_index and array_api_compat.is_array_api_obj(x) and x.shape:
            # The call rotates a view from start_index on: name the path that view takes.
            start = self.start_index if x.shape[-1] == self.head_dim else 0
            x = x[..., start:]
        return path_name(
            self._source,
            (x,),
            ("x",),
            positions,
            impl=impl,
            head_dim=self.head_dim - start,
            interleaved=self.interleaved,
            layout=layout,
            inverse=False,
            inplace=inplace,
            xp=xp,
            cu_seqlens=cu_seqlens,
        )

    def _rotate(self, *arrays: Array, positions: object, **options: Any) -> tuple[Array, ...]:
        if torch_op.compiling(arrays[0]):
            # torch.compile traces this call: one custom op, run by the pipeline.
            return torch_op.rotate(self._op_target, arrays, positions, **options)
        names = _NAMES[len(arrays)]
        if self.start_index and all(map(array_api_compat.is_array_api_obj, arrays)):
            return self._rotate_from(arrays, names, positions, options)
        return self._rotate_whole(arrays, names, positions, options)

    def _rotate_from(
        self,
        arrays: tuple[Array, ...],
        names: tuple[str, ...],
        positions: object,
        options: dict[str, Any],
    ) -> tuple[Array, ...]:
        """Rotate the features from ``start_index`` on, as views; keep those before."""
        start = self.start_index
        views = _slices.tails(arrays, names, self.head_dim, start)
        rotated = self._rotate_whole(views, names, positions, options, start=start)
        if options["inplace"]:
            return arrays
        xp = namespace_of(*arrays, xp=options["xp"], argument=names)
        return _slices.rejoin(arrays, rotated, start, xp)

    def _rotate_whole(
        self,
        arrays: tuple[Array, ...],
        names: tuple[str, ...],
        positions: object,
        options: dict[str, Any],
        *,
        start: int = 0,
    ) -> tuple[Array, ...]:
        head_dim, interleaved = self.head_dim - start, self.interleaved
        if array_api_compat.is_dask_array(arrays[0]):
            # Lazy libraries sit above the pipeline: dask calls it once per block.
            from ._lazy.dask import rotate_dask

            return rotate_dask(
                (self._source,) * len(arrays),
                arrays,
                names,
                positions,
                head_dim=head_dim,
                interleaved=interleaved,
                **options,
            )
        return _pipeline.rotate(
            self._source,
            arrays,
            names,
            positions,
            head_dim=head_dim,
            interleaved=interleaved,
            **options,
        )

    def tables(
        self,
        positions: object,
        *,
        dtype: Any,
        xp: Namespace | None = None,
        device: Any = None,
    ) -> tuple[Array, Array]:
        """Return ``(cos, sin)`` for ``positions``, computed in float64 and rounded once.

        Parameters
        ----------
        positions : int or array of int
            An integer array of any shape, or an int ``n`` for positions ``0 .. n-1``.
        dtype : dtype
            Dtype of the returned tables, of the library ``xp``. anyrope itself uses
            float32 tables for float16, bfloat16 and float32 inputs, and float64 tables
            for float64 inputs.
        xp : namespace, optional
            Array library of the result; inferred from ``positions``, NumPy for an int.
        device : device, optional
            Device of the result; that of ``positions`` by default.

        Returns
        -------
        cos, sin : arrays
            Shape ``positions.shape + (rotary_dim // 2,)``; the attention factor is applied.
            For M-RoPE, an array of positions has the stream axis first and the tables
            have shape ``positions.shape[1:] + (rotary_dim // 2,)``; for axial RoPE the
            ``n`` coordinates are last and the tables have shape
            ``positions.shape[:-1] + (rotary_dim // 2,)``.
            Length-dependent scaling uses the frequencies for ``max(positions) + 1``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> cos, sin = anyrope.RoPE(4).tables(3, dtype=np.float64)
        >>> cos.shape
        (3, 2)
        >>> float(sin[1, 0]) == float(np.sin(1.0))
        True
        """
        if not isinstance(positions, bool) and isinstance(positions, numbers.Integral):
            count = check_int(positions, "positions")
            if count < 0:
                raise ValueError(f"`positions` count must be non-negative; got {count}")
            host = np.arange(count, dtype=np.int64)
            if xp is None:
                xp = namespace_of(np.empty(0), argument="positions")
            check_namespace(xp)
        else:
            xp = namespace_of(positions, xp=xp, argument="positions")
            if not xp.isdtype(positions.dtype, "integral"):  # type: ignore[attr-defined]
                raise TypeError(f"`positions` must have an integer dtype; got {positions.dtype}")  # type: ignore[attr-defined]
            if is_traced(positions):
                raise TypeError(
                    "`positions` of RoPE.tables must be concrete, as the tables are built on "
                    "the host when it is called, and jax.jit traces it; close over a concrete "
                    "array, or pass the traced positions to rotate or __call__ instead"
                )
            if device is None:
                device = device_of(positions)
            host = to_host(positions)
        if not is_real_floating(xp, dtype):
            raise TypeError(
                f"`dtype` must be a real floating dtype of {library_name(xp)}; got {dtype!r}"
            )
        # Checked in the positions' own dtype: as int64, a uint64 above 2**63 would wrap.
        if host.size and (host.min() < 0 or host.max() >= 2**53):
            raise ValueError(
                f"`positions` must lie in [0, 2**53); got values in [{host.min()}, {host.max()}]"
            )
        host = host.astype(np.int64)
        cache = self._source.for_length(int(host.max()) + 1 if host.size else 0)
        if self.sections is None or not (self.axial or hasattr(positions, "shape")):
            cos, sin = cache.build(host, xp, device, np.dtype(np.float64))
        else:
            cos, sin = _mrope.join_sections(
                [
                    cache.build(stream, xp, device, np.dtype(np.float64))
                    for stream in _mrope.split_host_streams(host, self.sections, axial=self.axial)
                ],
                self.sections,
                xp,
                interleaved=self.scaling.mrope_interleaved,
            )
        return xp.astype(cos, dtype), xp.astype(sin, dtype)


_NAMES = {1: ("x",), 2: ("q", "k")}
"""The argument names of one array (``rotate``) and of two (``rope(q, k)``)."""


def _restore(  # noqa: PLR0917 - the arguments __reduce__ gives, in order
    cls: type[RoPE],
    head_dim: int,
    rotary_dim: int,
    base: float,
    interleaved: bool,
    scaling: RopeScaling,
    start_index: int = 0,
    max_positions: int | None = None,
) -> RoPE:
    return cls(
        head_dim,
        rotary_dim=rotary_dim,
        base=base,
        interleaved=interleaved,
        scaling=scaling,
        start_index=start_index,
        max_positions=max_positions,
    )
