"""The array libraries and devices anyrope knows how to reach, for checks and tests.

Each :class:`Backend` moves NumPy data onto one (library, device) and back *by bits*,
so that bfloat16 survives the trip whatever the libraries support natively. Nothing is
imported until :func:`known_backends` or :func:`extra_backends` is called.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._namespace import Array, Namespace

DTYPES = ("float16", "bfloat16", "float32", "float64")
_BITS = {
    "float16": np.uint16,
    "bfloat16": np.uint16,
    "float32": np.uint32,
    "float64": np.uint64,
    "int32": np.uint32,
    "int64": np.uint64,
}
_SIGNED = {np.uint16: np.int16, np.uint32: np.int32, np.uint64: np.int64}


@dataclass(frozen=True)
class Backend:
    """One array library on one device.

    ``unavailable`` is ``None`` when usable, else the reason it is not (not installed,
    no device), for skips and for ``python -m anyrope check``. ``scope`` is entered
    around every use of the backend's arrays (JAX needs 64-bit types switched on).
    """

    name: str
    device_label: str
    unavailable: str | None
    load: Callable[[], Namespace]
    from_bits: Callable[[np.ndarray[Any, Any], str], Array]
    to_bits: Callable[[Array], np.ndarray[Any, Any]]
    dtype_names: tuple[str, ...]
    scope: Callable[[], AbstractContextManager[Any]] = nullcontext

    @property
    def id(self) -> str:
        """Readable test id, e.g. ``"torch-cpu"``."""
        return f"{self.name}-{self.device_label}"

    @property
    def xp(self) -> Namespace:
        """The array-API namespace of this backend (imports the library)."""
        return self.load()

    def dtype(self, name: str) -> Any:
        """The library's dtype object called ``name``."""
        return getattr(self.xp, name) if name != "bfloat16" else _bfloat16(self.name, self.xp)

    def from_numpy(self, a: np.ndarray[Any, Any]) -> Array:
        """A copy of the NumPy array ``a`` (a float of :data:`DTYPES`, int32 or int64)."""
        name = a.dtype.name
        return self.from_bits(a.view(_BITS[name]), name)

    def to_numpy(self, x: Array) -> np.ndarray[Any, Any]:
        """A NumPy copy of ``x``; bfloat16 comes back as float32 (exact)."""
        bits = self.to_bits(x)
        if bits.dtype == np.uint16 and "bfloat16" in str(x.dtype):
            return bfloat16_bits_to_float32(bits)
        return bits.view(
            {np.uint16: np.float16, np.uint32: np.float32, np.uint64: np.float64}[bits.dtype.type]
        )


def bfloat16_bits_to_float32(bits: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Widen bfloat16 bit patterns to float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16_bits(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Round float32 values to bfloat16 bit patterns, to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def numpy_dtype(name: str) -> np.dtype[Any] | None:
    """NumPy's dtype called ``name``; bfloat16 needs ml_dtypes (``None`` without it)."""
    if name != "bfloat16":
        return np.dtype(name)
    if importlib.util.find_spec("ml_dtypes") is None:
        return None
    import ml_dtypes

    bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return bfloat16


def _bfloat16(library: str, xp: Namespace) -> Any:
    if library in ("numpy", "dask"):
        return numpy_dtype("bfloat16")
    return xp.bfloat16


def _numpy_backend() -> Backend:
    import array_api_compat.numpy as xp

    def from_bits(bits: np.ndarray[Any, Any], name: str) -> Array:
        return bits.view(numpy_dtype(name) or name).copy()

    names = DTYPES if numpy_dtype("bfloat16") is not None else ("float16", "float32", "float64")
    return Backend(
        "numpy", "cpu", None, lambda: xp, from_bits, lambda x: _host_bits(np.asarray(x)), names
    )


def _host_bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(a).view(
        {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    )


def _strict_backend() -> Backend:
    missing = importlib.util.find_spec("array_api_strict") is None

    def load() -> Namespace:
        import array_api_strict

        return array_api_strict

    def from_bits(bits: np.ndarray[Any, Any], name: str) -> Array:
        return load().asarray(bits.view(name).copy())

    def to_bits(x: Array) -> np.ndarray[Any, Any]:
        return _host_bits(np.from_dlpack(x))

    reason = "array-api-strict is not installed" if missing else None
    return Backend(
        "array_api_strict", "cpu", reason, load, from_bits, to_bits, ("float32", "float64")
    )


def _torch_backends() -> list[Backend]:
    missing = importlib.util.find_spec("torch") is None

    def load() -> Namespace:
        import array_api_compat.torch as xp

        return xp

    def make(device: str) -> Backend:
        def from_bits(bits: np.ndarray[Any, Any], name: str) -> Array:
            import torch

            signed = torch.from_numpy(bits.view(_SIGNED[bits.dtype.type]).copy())
            return signed.view(getattr(torch, name)).to(device)

        def to_bits(x: Array) -> np.ndarray[Any, Any]:
            import torch

            itemsize = x.element_size()
            signed = {2: torch.int16, 4: torch.int32, 8: torch.int64}[itemsize]
            host: np.ndarray[Any, Any] = x.detach().contiguous().cpu().view(signed).numpy()
            return host.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize])

        reason = "PyTorch is not installed" if missing else None
        if reason is None and device == "cuda":
            import torch

            if not torch.cuda.is_available():
                reason = "no CUDA device for PyTorch"
        return Backend("torch", device, reason, load, from_bits, to_bits, DTYPES)

    return [make("cpu"), make("cuda")]


def _cupy_backend() -> Backend:
    missing = importlib.util.find_spec("cupy") is None

    def load() -> Namespace:
        import array_api_compat.cupy as xp

        return xp

    def from_bits(bits: np.ndarray[Any, Any], name: str) -> Array:
        import cupy

        return cupy.asarray(bits).view(name)

    def to_bits(x: Array) -> np.ndarray[Any, Any]:
        return _host_bits(x.get())

    reason = "CuPy is not installed" if missing else None
    if reason is None:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() == 0:
                reason = "no CUDA device for CuPy"
        except Exception as error:
            reason = f"no CUDA device for CuPy ({error})"
    return Backend(
        "cupy", "cuda", reason, load, from_bits, to_bits, ("float16", "float32", "float64")
    )


def known_backends() -> list[Backend]:
    """Every backend anyrope knows, usable or not (see :attr:`Backend.unavailable`)."""
    return [_numpy_backend(), _strict_backend(), *_torch_backends(), _cupy_backend()]


def _jax_backend() -> Backend:
    missing = importlib.util.find_spec("jax") is None

    def load() -> Namespace:
        import jax.numpy as jnp

        return jnp

    def from_bits(bits: np.ndarray[Any, Any], name: str) -> Array:
        jnp = load()
        return jnp.asarray(bits.view(getattr(jnp, name)))

    def to_bits(x: Array) -> np.ndarray[Any, Any]:
        return _host_bits(np.asarray(x))

    def x64() -> AbstractContextManager[Any]:
        import jax

        # Without 64-bit types JAX turns float64 into float32 and int64 positions into
        # int32; the context manager leaves the global setting as it was.
        scope: AbstractContextManager[Any] = jax.enable_x64(True)
        return scope

    if missing:
        return Backend("jax", "cpu", "JAX is not installed", load, from_bits, to_bits, DTYPES)
    import jax

    return Backend("jax", jax.default_backend(), None, load, from_bits, to_bits, DTYPES, scope=x64)


def _dask_backend() -> Backend:
    missing = importlib.util.find_spec("dask") is None

    def load() -> Namespace:
        import array_api_compat.dask.array as xp

        return xp

    def from_bits(bits: np.ndarray[Any, Any], name: str) -> Array:
        import dask.array as da

        # Two chunks along each of the first two axes (batch and sequence, or the
        # positions' own two axes): the blocks are rotated separately and joined.
        chunks = tuple(max(1, (n + 1) // 2) if axis < 2 else n for axis, n in enumerate(bits.shape))
        return da.from_array(bits.view(numpy_dtype(name) or name).copy(), chunks=chunks)

    def to_bits(x: Array) -> np.ndarray[Any, Any]:
        return _host_bits(np.asarray(x.compute()))

    reason = "dask is not installed" if missing else None
    names = DTYPES if numpy_dtype("bfloat16") is not None else ("float16", "float32", "float64")
    return Backend("dask", "cpu", reason, load, from_bits, to_bits, names)


def extra_backends() -> list[Backend]:
    """JAX and dask, which ``python -m anyrope check`` covers and the test matrix does not.

    They have test files of their own (``tests/test_jax.py``, ``tests/test_dask.py``), so
    they stay out of :func:`known_backends`, from which the test matrix is built.

    Examples
    --------
    >>> from anyrope.tools._backends import extra_backends
    >>> [b.name for b in extra_backends()]
    ['jax', 'dask']
    """
    return [_jax_backend(), _dask_backend()]
