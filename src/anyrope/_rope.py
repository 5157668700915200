"""The front classes: :class:`RoPE` and :class:`XPos`, a RoPE with amplitudes.

A RoPE fixes its frequencies once and caches its tables per library, device and dtype;
the queries and keys of an XPos carry a decaying amplitude.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import array_api_compat
import numpy as np

from . import _mrope, _pipeline, _slices
from . import _torch_op as torch_op
from ._amplitude import Amplitude, xpos_zeta
from ._call import Call, make_call, shared_docs
from ._jax import is_traced
from ._namespace import (
    Array,
    Namespace,
    check_dtype,
    check_namespace,
    device_of,
    dtype_name,
    namespace_of,
)
from ._positions import host_positions
from ._qkv import join_qkv, joint_qk, split_qkv
from ._tables import TableSource
from ._validation import MAX_POSITION, check_base, check_bool, check_even, check_int
from .scaling import RopeScaling, from_hf_config, parse_rope_scaling
from .scaling._types import FloatArray
from .scaling.hf import from_hf_config_layers


@shared_docs
class RoPE:
    """Rotary position embedding for heads of width ``head_dim``.

    Holds the frequencies (float64, on the host) and caches cos/sin tables for each
    (array library, device, dtype) it meets, growing them when a larger position
    arrives. One instance may be shared by several threads, pickled (without its
    tables, which are rebuilt with the same bits where it is unpickled) and deep-copied.
    Its settings are fixed when it is made: setting an attribute raises
    ``AttributeError`` (the tables come from the settings); make a new one instead.

    Parameters
    ----------
    head_dim : int
        Width of each attention head (the last axis of q and k); positive and even.
    {shared}

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
        head_dim, rotary_dim, base, max_position_embeddings, start_index, max_positions = (
            torch_op.concrete_when_compiling(
                head_dim, rotary_dim, base, max_position_embeddings, start_index, max_positions
            )
        )
        self.head_dim = check_even(head_dim, "head_dim")
        bounds = f"at least 0 and below head_dim={head_dim}"
        self.start_index = check_int(start_index, "start_index", 0, self.head_dim, bounds)
        width = self.head_dim - self.start_index
        rotary_dim = width if rotary_dim is None else rotary_dim
        self.rotary_dim = check_even(rotary_dim, "rotary_dim", self.head_dim)
        if self.rotary_dim > width:
            raise ValueError(
                f"`rotary_dim`={self.rotary_dim} features from `start_index`={self.start_index} "
                f"end past head_dim={self.head_dim}"
            )
        self.base = check_base(base)
        self.interleaved = check_bool(interleaved, "interleaved")
        self.scaling = parse_rope_scaling(scaling, max_position_embeddings=max_position_embeddings)
        self._check_scaling()
        self.max_position_embeddings = self.scaling.max_position_embeddings
        self.softmax_scale = self.scaling.softmax_scale
        self.axial = self.scaling.rope_type == "axial"
        self.sections = self.scaling.sections(self.rotary_dim)
        if max_positions is not None:
            bounds = "at least 1 and at most 2**53"
            max_positions = check_int(max_positions, "max_positions", 1, MAX_POSITION + 1, bounds)
        self.max_positions = max_positions
        # The tables of queries, then of keys: one source for both but in xPos. The keys
        # name the table sources to the torch custom op that torch.compile traces.
        made = torch_op.table_sources(
            self.scaling, self.rotary_dim, self.base, self.max_positions, self._amplitudes()
        )
        self._source: TableSource = made[0][0]
        self._sources: tuple[TableSource, ...] = (made[0][0], made[-1][0])
        self._op_keys: tuple[int, ...] = (made[0][1], made[-1][1])
        self.inv_freq = self._source.default.inv_freq
        self.attention_factor = self._source.default.attention_factor
        self._made = True

    def __setattr__(self, name: str, value: Any) -> None:
        # The tables are built from the settings when the RoPE is made: a setting changed
        # later would show in the attributes and the repr, and not in the rotation.
        if "_made" in self.__dict__:
            kind = type(self).__name__
            raise AttributeError(
                f"a {kind}'s settings are fixed when it is made (its tables come from them); "
                f"got {name}={value!r}: make a new {kind} with it instead"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a {type(self).__name__}'s settings are fixed; got del {name}")

    def _amplitudes(self) -> tuple[Amplitude | None, ...]:
        """The amplitudes of the tables: none for RoPE (one source for queries and keys)."""
        return (None,)

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
        elif fraction is not None and int(self.head_dim * fraction) != self.rotary_dim:
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
        ...) need ``layer_type``; :meth:`from_hf_config_layers` gives them all. In a
        family whose layers differ in whether they rotate (Cohere2's full-attention
        layers do not), it gives the rotation of the layers that rotate, and
        ``layer_type`` of a type without RoPE is an error. A family whose rotation
        anyrope does not model, or a key it does not use, is an error that names it:
        never a silently different rotation.

        Parameters
        ----------
        config : Mapping, object, str or os.PathLike
            The model's ``config.json`` as a dict, an object with those attributes, or
            its path (the file, or the model folder that holds it).
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
        # A RoPE whatever the class it is asked of: a model config has no xPos amplitudes.
        return RoPE(settings.head_dim, **settings.kwargs(), max_positions=max_positions)

    @classmethod
    def from_hf_config_layers(
        cls, config: Any, *, max_positions: int | None = None
    ) -> dict[str, RoPE | None]:
        """Build the RoPE of every layer type of a Hugging Face model config.

        For a config with settings per layer type (Gemma 3's ``"full_attention"`` and
        ``"sliding_attention"``), one :class:`RoPE` per type, ``None`` for a type without
        RoPE (``null`` settings); for a config with one set of settings, the same
        :class:`RoPE` for each of its ``layer_types`` (or under ``"default"`` when it
        lists none). A type whose layers the family does not rotate is ``None`` too
        (Cohere2's, EXAONE 4's and Kolibri's full-attention layers, ``layer_rope_theta``
        0), and Granite-SWA's ``layer_rope_theta`` gives each type its base. Layer ``i``
        of the model uses ``ropes[config.layer_types[i]]``.

        Parameters
        ----------
        config : Mapping, object, str or os.PathLike
            The model's ``config.json`` as a dict, an object with those attributes, or
            its path (the file, or the model folder that holds it).
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
        layers = from_hf_config_layers(config)
        # Layer types with the same settings share one RoPE (and its tables).
        made = {
            settings: RoPE(settings.head_dim, **settings.kwargs(), max_positions=max_positions)
            for settings in set(layers.values())
            if settings is not None
        }
        return {name: made.get(settings) for name, settings in layers.items()}  # type: ignore[arg-type]

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
        if seq_len is not None:
            seq_len = check_int(seq_len, "seq_len", 0, MAX_POSITION + 1, "from 0 to 2**53")
        return self._source.frequencies(seq_len)

    def cache_nbytes(self) -> int:
        """Return the bytes held by this RoPE's cached cos/sin tables.

        Every library, device and dtype the tables were built for counts; see
        :meth:`clear_cache`. A call, as :func:`anyrope.cache_nbytes` is for the
        functional API's tables.

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
        >>> rope.cache_nbytes()  # 256 positions x 32 pairs, cos and sin in float32
        65536
        >>> rope.clear_cache()
        >>> rope.cache_nbytes()
        0
        """
        return sum(source.nbytes for source in set(self._sources))

    def clear_cache(self) -> None:
        """Drop the cached cos/sin tables; they are rebuilt (the same bits) when needed.

        The tables of positions ``0 .. max_positions - 1`` of a RoPE with a capacity stay
        (they never move or shrink while the RoPE lives: a captured CUDA graph or an
        exported program holds their address); the rows built past them go.
        """
        for source in self._sources:
            source.clear()

    # The keywords that rebuild this object after head_dim, in the order of its repr.
    _KEYWORDS: tuple[str, ...]
    _KEYWORDS = ("rotary_dim", "base", "interleaved", "start_index", "max_positions", "scaling")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings: the frequencies are recomputed (the same bits) and
        # the tables, which live on devices, are rebuilt where they are needed.
        return (_restore, (type(self), self.head_dim, self._settings()))

    def _settings(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._KEYWORDS}

    def __repr__(self) -> str:
        # Every setting but those at their default from start_index on.
        default = RopeScaling(max_position_embeddings=self.max_position_embeddings)
        defaults = {"start_index": 0, "max_positions": None, "scaling": default}
        shown = (
            f"{name}={value!r}"
            for name, value in self._settings().items()
            if name not in defaults or value != defaults[name]
        )
        return f"{type(self).__name__}(head_dim={self.head_dim}, {', '.join(shown)})"

    @shared_docs
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
        {shared}

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
        call = make_call(
            (q, k), ("q", "k"), positions, layout, inverse, inplace, impl, xp, cu_seqlens
        )
        q2, k2 = self._rotate(call, BOTH)
        return q2, k2

    @shared_docs
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
        {shared}

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
        call = make_call((x,), ("x",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
        (y,) = self._rotate(call, QUERIES)
        return y

    @shared_docs
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
        call = make_call(
            (qkv,), ("qkv",), positions, layout, inverse, inplace, impl, xp, cu_seqlens
        )
        return self._rotate_qkv(call, num_heads_q)

    @shared_docs
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
        {shared}

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
        call = make_call((x,), ("x",), positions, layout, False, inplace, impl, xp, cu_seqlens)
        # The call rotates the features from start_index on: name the path their view takes.
        start = self.start_index if array_api_compat.is_array_api_obj(x) else 0
        if start:
            call = call.on(_slices.tails(call.arrays, call.names, self.head_dim, start))
        return _pipeline.path_name(
            self._source, call, head_dim=self.head_dim - start, interleaved=self.interleaved
        )

    def _target(self, call: Call, sides: slice) -> torch_op.Target:
        """What the torch custom op needs of this RoPE for ``call`` (see :meth:`_rotate`)."""
        keys = self._op_keys[::-1] if call.inverse else self._op_keys
        return torch_op.Target(keys[sides], self.head_dim, self.interleaved, self.start_index)

    def _rotate(self, call: Call, sides: slice) -> tuple[Array, ...]:
        """Rotate the arrays of ``call``, each with the tables of its side (``sides`` of
        queries and keys)."""
        if torch_op.compiling(call.arrays[0]):
            # torch.compile traces this call: one custom op, run by the pipeline.
            return torch_op.rotate(self._target(call, sides), call)
        # The inverse of a scaled rotation a R(theta) is R(-theta) / a: the pipeline's
        # inverse with the other side's tables (xPos: amplitude 1 / a).
        sources = (self._sources[::-1] if call.inverse else self._sources)[sides]
        start, interleaved = self.start_index, self.interleaved
        if not start or not all(map(array_api_compat.is_array_api_obj, call.arrays)):
            return _pipeline.rotate_each(
                sources, call, head_dim=self.head_dim, interleaved=interleaved
            )
        # The features from start_index on, as views; those before are kept.
        whole = call.arrays
        tails = _slices.tails(whole, call.names, self.head_dim, start)
        rotated = _pipeline.rotate_each(
            sources, call.on(tails), head_dim=self.head_dim - start, interleaved=interleaved
        )
        if call.inplace:
            return whole
        return _slices.rejoin(whole, rotated, start, namespace_of(*whole, xp=call.xp))

    def _rotate_qkv(self, call: Call, num_heads_q: int | None) -> Array:
        """Rotate the fused array of ``call`` (see :meth:`rotate_qkv`)."""
        qkv = call.arrays[0]
        if call.xp is not None:  # a namespace of another library is named for `qkv`, not its views
            namespace_of(qkv, xp=call.xp, argument="qkv")
        if torch_op.compiling(qkv):  # the op that torch.compile traces takes q and k
            return torch_op.rotate_qkv(self._target(call, BOTH), call, num_heads_q)
        # In place, q and k as one view: one call's overhead. Not for xPos, which scales
        # them apart.
        if call.inplace and self._sources[0] is self._sources[1]:
            qk = joint_qk(qkv, call.layout, num_heads_q)
            if qk is not None:
                # Built here rather than by call.on: a frame less at each decode step.
                self._rotate(tuple.__new__(Call, ((qk,), *call[1:])), QUERIES)
                return qkv
        fused = split_qkv(qkv, call.layout, num_heads_q)
        q, k = self._rotate(call.on((fused.q, fused.k), ("q", "k")), BOTH)
        if call.inplace:
            return qkv
        return join_qkv(fused, q, k, namespace_of(qkv, xp=call.xp, argument="qkv"))

    def tables(
        self,
        positions: object,
        *,
        dtype: Any,
        xp: Namespace | None = None,
        device: Any = None,
    ) -> tuple[Array, Array]:
        """Return ``(cos, sin)`` for ``positions``, computed in float64 and rounded once.

        The rounding is to float32 (to float64 for float64 tables); float16 and bfloat16
        tables are rounded from the float32 ones.

        Parameters
        ----------
        positions : int or array of int
            An integer array of any shape, or an int ``n`` for positions ``0 .. n-1``.
        dtype : dtype
            Dtype of the returned tables, of the library ``xp``. anyrope itself uses
            float32 tables for float16, bfloat16 and float32 inputs, and float64 tables
            for float64 inputs. Half types are rounded from the float32 tables, so their
            bits are the same in every library.
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
        # The position streams of M-RoPE (an array) and axial RoPE, if any.
        sections = self.sections if self.axial or hasattr(positions, "shape") else None
        if not isinstance(positions, bool) and isinstance(positions, numbers.Integral):
            bounds = "a count from 0 to 2**53"
            count = check_int(positions, "positions", 0, MAX_POSITION + 1, bounds)
            if xp is not None:
                check_namespace(xp)
            positions = (np if xp is None else xp).arange(count)
        xp = namespace_of(positions, xp=xp, argument="positions")
        if not xp.isdtype(positions.dtype, "integral"):  # type: ignore[attr-defined]
            raise TypeError(f"`positions` must have an integer dtype; got {positions.dtype}")  # type: ignore[attr-defined]
        if is_traced(positions):
            raise TypeError(
                "`positions` of RoPE.tables must be concrete, as the tables are built on "
                "the host when it is called, and jax.jit traces it; close over a concrete "
                "array, or pass the traced positions to rotate or __call__ instead"
            )
        device = device_of(positions) if device is None else device
        check_dtype(xp, dtype)
        # Rounded once on the host to float32 (float64 for float64): half types are then
        # rounded from float32, which every library does alike (and from float64 not:
        # torch and JAX go through float32 too, NumPy does not).
        rounded = np.dtype(np.float64 if dtype_name(dtype) == "float64" else np.float32)
        host = host_positions(positions)
        cache = self._source.for_length(int(host.max()) + 1 if host.size else 0)
        if sections is None:
            cos, sin = cache.build(host, xp, device, rounded)
        else:
            cos, sin = _mrope.join_sections(
                [
                    cache.build(stream, xp, device, rounded)
                    for stream in _mrope.split_host_streams(host, sections, axial=self.axial)
                ],
                sections,
                xp,
                interleaved=self.scaling.mrope_interleaved,
            )
        return xp.astype(cos, dtype, copy=False), xp.astype(sin, dtype, copy=False)


#: The sides (queries, keys) of the arrays of ``rope(q, k)``, of ``rotate`` and of keys.
BOTH, QUERIES, KEYS = slice(0, 2), slice(0, 1), slice(1, 2)


#: ``scale_base`` stays below this: the exponent's denominator of the host power.
MAX_SCALE_BASE = 2**40


@shared_docs
class XPos(RoPE):
    """Rotary embedding with xPos amplitudes: a per-pair decay with the distance.

    Sun et al. 2022 (arXiv 2212.10554), as rotary-embedding-torch
    (``RotaryEmbedding(dim, use_xpos=True, xpos_scale_base=...)``) and flash-attn
    (``RotaryEmbedding(dim, scale_base=...)``) implement it. Pair ``i`` of a query at
    position ``m`` is rotated as by :class:`RoPE` and multiplied by

    ``a_i(m) = zeta_i ** ((m - center) / scale_base)``,
    ``zeta_i = (2i + 0.4 d) / (1.4 d)``, ``d = rotary_dim``;

    the same pair of a key is rotated and divided by ``a_i(m)``. A query at ``m`` and a
    key at ``n`` then meet with the factor ``zeta_i ** ((m - n) / scale_base)`` on pair
    ``i``: it depends on ``m - n`` only, so ``center`` does not change the attention; it
    only keeps the amplitudes in float range. The amplitude is part of the float64
    cos/sin tables, rounded once (as the attention factor of :class:`RoPE`): every path
    and backend gives the same bits.

    Amplitudes leave the float range far from ``center``: for float32 tables (inputs of
    16 and 32 bits) once ``|m - center| * 1.2528 / scale_base`` passes about 88 (the
    smallest ``zeta_0 = 2/7``; about 36,000 positions for ``scale_base=512``), 709 for
    float64. Keys are then infinite and queries 0, as in the peers' tables.

    Parameters
    ----------
    head_dim : int
        Width of each attention head (the last axis of q and k); positive and even.
    scale_base : int, optional
        The positive integer ``scale_base`` (flash-attn's ``scale_base``,
        rotary-embedding-torch's ``xpos_scale_base``), below ``2**40``. Default 512.
    center : int, optional
        The position whose amplitude is 1, a non-negative integer below ``2**53``.
        Default 0. The peers center at ``seq_len // 2``: rotary-embedding-torch at the
        length of each call, flash-attn at the length of its cached tables.
    {shared}

    Attributes
    ----------
    inv_freq : numpy.ndarray
        float64 frequencies ``theta_i``, shape ``(rotary_dim // 2,)``.
    zeta : numpy.ndarray
        float64 per-pair bases ``zeta_i``, shape ``(rotary_dim // 2,)``, each the exact
        fraction ``(10 i + 2 d) / (7 d)`` rounded once.

    See Also
    --------
    RoPE : The rotation without amplitudes.

    Notes
    -----
    An :class:`XPos` is a :class:`RoPE` with amplitudes: it takes every option of a
    RoPE call and every backend, torch.compile and dask included. ``xpos(q, k)`` and
    :meth:`RoPE.rotate_qkv` scale queries and keys each their way; one array is rotated
    by :meth:`rotate_queries` or :meth:`rotate_keys` (:meth:`RoPE.rotate` does not
    know which it is, and refuses). :meth:`RoPE.tables` gives those of the queries.

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> xpos = anyrope.XPos(64, scale_base=512)
    >>> q = np.ones((1, 5, 8, 64))                     # (batch, seq, heads, head_dim)
    >>> k = np.ones((1, 5, 2, 64))
    >>> q2, k2 = xpos(q, k)
    >>> q2.shape, k2.shape
    ((1, 5, 8, 64), (1, 5, 2, 64))
    >>> bool(np.all(q2[0, 0] == q[0, 0]))              # position 0 = center: no change
    True
    >>> def score(m, n):                                # q at m meets k at n
    ...     qm = xpos.rotate_queries(q[:, :1], positions=m)
    ...     kn = xpos.rotate_keys(k[:, :1], positions=n)
    ...     return float(np.sum(qm[0, 0, 0] * kn[0, 0, 0]))
    >>> bool(np.isclose(score(3, 1), score(1003, 1001)))
    True
    """

    def __init__(
        self,
        head_dim: int,
        *,
        scale_base: int = 512,
        center: int = 0,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        interleaved: bool = False,
        start_index: int = 0,
        max_positions: int | None = None,
    ) -> None:
        scale_base, center = torch_op.concrete_when_compiling(scale_base, center)
        bounds = "a positive integer below 2**40"
        self.scale_base = check_int(scale_base, "scale_base", 1, MAX_SCALE_BASE, bounds)
        bounds = "a non-negative integer below 2**53"
        self.center = check_int(center, "center", 0, MAX_POSITION, bounds)
        super().__init__(
            head_dim,
            rotary_dim=rotary_dim,
            base=base,
            interleaved=interleaved,
            start_index=start_index,
            max_positions=max_positions,
        )

    @property
    def zeta(self) -> FloatArray:
        """Return the per-pair bases ``zeta_i`` of the amplitudes.

        Computed when asked, so that an XPos made inside compiled code is not traced
        through NumPy.

        Returns
        -------
        numpy.ndarray
            Float64 and read-only, of shape ``(rotary_dim // 2,)``.
        """
        return xpos_zeta(self.rotary_dim)

    def _amplitudes(self) -> tuple[Amplitude | None, ...]:
        """Queries are multiplied by the amplitude, keys divided by it."""
        return tuple(
            Amplitude(self.rotary_dim, self.scale_base, self.center, sign) for sign in (1, -1)
        )

    _KEYWORDS = ("scale_base", "center", *RoPE._KEYWORDS[:-1])  # no scaling

    def rotate(self, x: Array, positions: object = None, **options: Any) -> Array:
        """Refused: queries and keys are scaled apart; see :meth:`rotate_queries`.

        Parameters
        ----------
        x : array
            An array of queries or keys.
        positions : object
            Its positions.
        **options
            The options of :meth:`RoPE.rotate`.

        Returns
        -------
        array
            Never: raises ``TypeError``.

        Raises
        ------
        TypeError
            Always: call :meth:`rotate_queries` or :meth:`rotate_keys`.
        """
        raise TypeError(
            "XPos scales queries and keys apart: call rotate_queries or rotate_keys "
            "(or xpos(q, k)), not rotate"
        )

    @shared_docs
    def rotate_queries(
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
        """Rotate queries and multiply each pair by its amplitude.

        Parameters
        ----------
        x : array
            Queries of any array-API library, real floating dtype.
        inverse : bool, optional
            Undo this call: rotate by the negative angle and divide by the amplitude.
        {shared}

        Returns
        -------
        array
            Same library, device, dtype and shape as ``x``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> x = np.zeros((3, 1, 2))                      # (seq, heads, head_dim)
        >>> x[..., 0] = 1.0
        >>> y = anyrope.XPos(2, scale_base=1).rotate_queries(x)
        >>> np.linalg.norm(y[:, 0], axis=-1)             # zeta_0 = 2/7 to the power m
        array([1.        , 0.28571429, 0.08163265])
        """
        call = make_call((x,), ("x",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
        (y,) = self._rotate(call, QUERIES)
        return y

    @shared_docs
    def rotate_keys(
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
        """Rotate keys and divide each pair by its amplitude.

        Parameters
        ----------
        x : array
            Keys of any array-API library, real floating dtype.
        inverse : bool, optional
            Undo this call: rotate by the negative angle and multiply by the amplitude.
        {shared}

        Returns
        -------
        array
            Same library, device, dtype and shape as ``x``.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> x = np.zeros((3, 1, 2))                      # (seq, heads, head_dim)
        >>> x[..., 0] = 1.0
        >>> y = anyrope.XPos(2, scale_base=1).rotate_keys(x)
        >>> np.linalg.norm(y[:, 0], axis=-1)             # (7/2) to the power m
        array([ 1.  ,  3.5 , 12.25])
        """
        call = make_call((x,), ("x",), positions, layout, inverse, inplace, impl, xp, cu_seqlens)
        (y,) = self._rotate(call, KEYS)
        return y


def _restore(cls: type[RoPE], head_dim: int, settings: dict[str, Any]) -> RoPE:
    return cls(head_dim, **settings)
