"""The sinusoidal absolute position encoding (Vaswani et al., 2017), for comparison with RoPE.

Computed like the RoPE tables (numerical-contract.rst, "How every path computes" 2): angles, sines
and cosines in float64 with NumPy on the host, rounded once to float32 (float64 for float64 output),
then moved to the caller's library and device. JAX positions traced by ``jit`` are encoded the same
way, on the host, when the compiled function runs.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

from ._frequencies import default_inv_freq
from ._hostmath import sincos
from ._jax import is_traced, when_run
from ._namespace import (
    Array,
    Namespace,
    check_dtype,
    check_namespace,
    device_of,
    namespace_of,
    table_dtype,
    to_host,
)
from ._validation import MAX_POSITION, check_even, check_int, describe

__all__ = ["sinusoidal"]


def sinusoidal(
    positions: Array,
    dim: int,
    *,
    base: float = 10000.0,
    dtype: Any,
    device: Any = None,
    xp: Namespace | None = None,
) -> Array:
    """Sinusoidal position encodings ``PE[m, 2i] = sin(m w_i)``, ``PE[m, 2i+1] = cos(m w_i)``.

    ``w_i = base ** (-2i / dim)``, the same frequencies as RoPE's ``inv_freq``. The
    encoding is *added* to token embeddings; RoPE instead rotates queries and keys by
    the same angles.

    Parameters
    ----------
    positions : int or array of int
        An int ``n`` (at most ``2**53``) means positions ``0 .. n-1``; an integer array of
        any shape and integer dtype gives the positions directly (below ``2**53`` in
        magnitude, exact in float64; a uint64 value is compared as itself). JAX positions
        traced by ``jax.jit`` or ``jax.vmap`` are encoded on the host when the traced
        function runs (the same bits; an out-of-range one raises then).
    dim : int
        Width of the encoding: positive and even.
    base : float, default 10000.0
        Base of the geometric progression of wavelengths.
    dtype : dtype
        A real floating dtype of the output library. Half types are rounded from the
        float32 table (as RoPE's tables are), float64 directly from float64.
    device : device, optional
        Device of the result when ``positions`` is an int; otherwise the device of
        ``positions``.
    xp : namespace, optional
        The output library; inferred from ``positions`` if it is an array, else NumPy.

    Returns
    -------
    array
        Shape ``positions.shape + (dim,)`` (``(n, dim)`` for an int).

    Examples
    --------
    >>> import numpy as np
    >>> import anyrope
    >>> pe = anyrope.sinusoidal(3, 4, dtype=np.float64)
    >>> pe.shape
    (3, 4)
    >>> bool(np.allclose(pe[1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)]))
    True
    """
    dim = check_even(dim, "dim")
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        count = check_int(positions, "positions", 0, MAX_POSITION + 1, "a count from 0 to 2**53")
        xp = array_api_compat.array_namespace(np.empty(0)) if xp is None else xp
        check_namespace(xp)
        host = np.arange(count, dtype=np.int64)
    else:
        xp = namespace_of(positions, xp=xp, argument="positions")
        if not xp.isdtype(positions.dtype, "integral"):
            raise TypeError(f"`positions` must have an integer dtype; got {describe(positions)}")
        if is_traced(positions):
            # Encoded on the host by the NumPy path when the compiled function runs (the same
            # bits as an eager call; an out-of-range position raises then).
            check_dtype(xp, dtype)
            host_dtype = np.dtype(dtype)

            def compute(values: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any]]:
                return (sinusoidal(values, dim, base=base, dtype=host_dtype),)

            return when_run(compute, positions, (((*positions.shape, dim), host_dtype),))[0]
        device = device_of(positions) if device is None else device
        host = np.asarray(to_host(positions))
        # Checked in the array's own dtype: as int64, a uint64 above 2**63 would wrap and
        # the magnitude of -2**63 would overflow.
        if host.size and max(-int(host.min()), int(host.max())) >= MAX_POSITION:
            raise ValueError(
                "`positions` must be below 2**53 in magnitude, beyond which float64 cannot "
                f"represent every integer; got values in [{host.min()}, {host.max()}]"
            )
        host = host.astype(np.int64)
    check_dtype(xp, dtype)

    angles = host.astype(np.float64)[..., None] * default_inv_freq(dim, base)
    table = np.stack(sincos(angles), axis=-1).reshape((*host.shape, dim))
    out = xp.asarray(table.astype(table_dtype(xp, dtype)), device=device)
    return xp.astype(out, dtype, copy=False)
