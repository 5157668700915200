"""The :class:`RoPE` object: frequencies fixed once, tables cached per library, device and dtype."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ._api import apply
from ._frequencies import default_inv_freq
from ._namespace import Array, Namespace, device_of, is_real_floating, namespace_of, to_host
from ._tables import TableCache
from ._validation import check_base, check_bool, check_head_dim, check_int, check_rotary_dim


class RoPE:
    """Rotary position embedding for heads of width ``head_dim``.

    Holds the frequencies (float64, on the host) and caches cos/sin tables for each
    (array library, device, dtype) it meets, growing them when a larger position
    arrives. One instance may be shared by several threads.

    Parameters
    ----------
    head_dim : int
        Width of each attention head (the last axis of q and k); positive and even.
    rotary_dim : int, optional
        Number of leading features that rotate; the rest are copied bit for bit.
        Positive, even and at most ``head_dim``. Defaults to ``head_dim``.
    base : float, optional
        Base of the frequencies ``theta_i = base ** (-2i / rotary_dim)`` (``rope_theta``
        in Hugging Face configs). Finite and greater than 1. Default 10000.
    interleaved : bool, optional
        ``False`` (default): pairs are ``(x[i], x[i + rotary_dim/2])``, the half-split
        layout of Hugging Face's ``rotate_half`` and GPT-NeoX. ``True``: pairs are
        ``(x[2i], x[2i+1])``, the layout of Meta's complex form and GPT-J.

    Attributes
    ----------
    inv_freq : numpy.ndarray
        float64 frequencies ``theta_i``, shape ``(rotary_dim // 2,)``.
    attention_factor : float
        Factor multiplied into cos and sin (1.0 without scaling).

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
    ) -> None:
        self.head_dim = check_head_dim(head_dim)
        self.rotary_dim = (
            self.head_dim if rotary_dim is None else check_rotary_dim(rotary_dim, self.head_dim)
        )
        self.base = check_base(base)
        self.interleaved = check_bool(interleaved, "interleaved")
        self.inv_freq = default_inv_freq(self.rotary_dim, self.base)
        self.inv_freq.flags.writeable = False
        self.attention_factor = 1.0
        self._cache = TableCache(self.inv_freq, self.attention_factor)

    def __repr__(self) -> str:
        return (
            f"RoPE(head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
            f"base={self.base!r}, interleaved={self.interleaved})"
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
    ) -> tuple[Array, Array]:
        """Rotate queries and keys; see :func:`anyrope.rotate_qk` for the arguments.

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
        q2, k2 = apply(
            self,
            (q, k),
            ("q", "k"),
            positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
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
    ) -> Array:
        """Rotate one array; see :func:`anyrope.rotate` for the arguments.

        Examples
        --------
        >>> import numpy as np
        >>> import anyrope
        >>> x = np.zeros((3, 1, 2), dtype=np.float32)    # (seq, heads, head_dim)
        >>> x[..., 0] = 1.0
        >>> anyrope.RoPE(2).rotate(x)[:, 0, :].round(4).tolist()
        [[1.0, 0.0], [0.5403, 0.8415], [-0.4161, 0.9093]]
        """
        (y,) = apply(
            self,
            (x,),
            ("x",),
            positions,
            layout=layout,
            inverse=inverse,
            inplace=inplace,
            impl=impl,
            xp=xp,
        )
        return y

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
        if isinstance(positions, numbers.Integral) and not isinstance(positions, bool):
            count = check_int(positions, "positions")
            if count < 0:
                raise ValueError(f"`positions` count must be non-negative; got {count}")
            host = np.arange(count, dtype=np.int64)
            if xp is None:
                xp = namespace_of(np.empty(0), argument="positions")
        else:
            xp = namespace_of(positions, xp=xp, argument="positions")
            if not xp.isdtype(positions.dtype, "integral"):  # type: ignore[attr-defined]
                raise TypeError(f"`positions` must have an integer dtype; got {positions.dtype}")  # type: ignore[attr-defined]
            if device is None:
                device = device_of(positions)
            host = to_host(positions).astype(np.int64)
        if not is_real_floating(xp, dtype):
            raise TypeError(f"`dtype` must be a real floating dtype of {xp.__name__}; got {dtype}")
        if host.size and (host.min() < 0 or host.max() >= 2**53):
            raise ValueError(
                f"`positions` must lie in [0, 2**53); got values in [{host.min()}, {host.max()}]"
            )
        cos, sin = self._cache.build(host, xp, device, np.dtype(np.float64))
        return xp.astype(cos, dtype), xp.astype(sin, dtype)
