"""The array libraries and devices anyrope knows how to reach, for checks and tests.

Each :class:`Backend` moves NumPy data onto one (library, device) and back *by bits*,
so that bfloat16 survives the trip whatever the libraries support natively. Nothing is
imported until :func:`known_backends` or :func:`extra_backends` is called.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeAlias

import numpy as np

from .._namespace import Array, Namespace, dtype_name, to_host

DTYPES = ("float16", "bfloat16", "float32", "float64")
HostArray: TypeAlias = np.ndarray[Any, Any]
"""A NumPy array on the host: bit patterns, their values, positions."""


def _host_bits(x: Array) -> HostArray:
    """The bit patterns of ``x``, copied to the host (an array of a dtype NumPy has)."""
    host = np.ascontiguousarray(to_host(x))
    return host.view(f"u{host.itemsize}")


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
    from_bits: Callable[[HostArray, str], Array]
    dtype_names: tuple[str, ...]
    to_bits: Callable[[Array], HostArray] = _host_bits
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
        if name == "bfloat16" and self.name in ("numpy", "dask"):
            return numpy_dtype(name)
        return getattr(self.xp, name)

    def from_numpy(self, a: HostArray) -> Array:
        """A copy of the NumPy array ``a`` (a float of :data:`DTYPES`, int32 or int64)."""
        return self.from_bits(a.view(f"u{a.itemsize}"), a.dtype.name)

    def to_numpy(self, x: Array) -> HostArray:
        """A NumPy copy of ``x``; bfloat16 comes back as float32 (exact)."""
        return float_values(self.to_bits(x), dtype_name(x.dtype))


def float_values(bits: HostArray, dtype: str) -> HostArray:
    """The values of ``dtype`` bit patterns; bfloat16 is widened to float32 (exact)."""
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(dtype)


def float32_to_bfloat16_bits(x: HostArray) -> HostArray:
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


def _missing(module: str, library: str) -> str | None:
    return f"{library} is not installed" if importlib.util.find_spec(module) is None else None


def _numpy_dtype_names() -> tuple[str, ...]:
    """NumPy's floats: bfloat16 only with ml_dtypes."""
    return tuple(d for d in DTYPES if numpy_dtype(d) is not None)


def _values(bits: HostArray, name: str) -> HostArray:
    """A NumPy copy of the values of the bit patterns ``bits`` of dtype ``name``."""
    return bits.view(numpy_dtype(name) or name).copy()


def _asarray(module: str) -> tuple[Callable[[], Namespace], Callable[..., Array]]:
    """``load`` and ``from_bits`` of a library whose ``asarray`` takes NumPy's values."""
    load = partial(importlib.import_module, module)
    return load, lambda bits, name: load().asarray(_values(bits, name))


def _numpy_backend() -> Backend:
    load, from_bits = _asarray("array_api_compat.numpy")
    return Backend("numpy", "cpu", None, load, from_bits, _numpy_dtype_names())


def _strict_backend() -> Backend:
    load, from_bits = _asarray("array_api_strict")
    reason, names = _missing("array_api_strict", "array-api-strict"), ("float32", "float64")
    return Backend("array_api_strict", "cpu", reason, load, from_bits, names)


def _torch_backend(device: str) -> Backend:
    # Through integers of the same width: NumPy has no bfloat16 of its own.
    def from_bits(bits: HostArray, name: str) -> Array:
        import torch

        signed = bits.view(f"int{8 * bits.itemsize}").copy()
        return torch.from_numpy(signed).view(getattr(torch, name)).to(device)

    def to_bits(x: Array) -> HostArray:
        import torch

        return _host_bits(x.view(getattr(torch, f"int{8 * x.element_size()}")))

    reason = _missing("torch", "PyTorch")
    if reason is None and device == "cuda":
        import torch

        if not torch.cuda.is_available():
            reason = "no CUDA device for PyTorch"
    load = partial(importlib.import_module, "array_api_compat.torch")
    return Backend("torch", device, reason, load, from_bits, DTYPES, to_bits)


def _cupy_backend() -> Backend:
    reason = _missing("cupy", "CuPy")
    if reason is None:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() == 0:
                reason = "no CUDA device for CuPy"
        except Exception as error:
            reason = f"no CUDA device for CuPy ({error})"
    load, from_bits = _asarray("array_api_compat.cupy")
    return Backend("cupy", "cuda", reason, load, from_bits, ("float16", "float32", "float64"))


def known_backends() -> list[Backend]:
    """Every backend anyrope knows, usable or not (see :attr:`Backend.unavailable`)."""
    return [
        _numpy_backend(),
        _strict_backend(),
        _torch_backend("cpu"),
        _torch_backend("cuda"),
        _cupy_backend(),
    ]


def _jax_backend() -> Backend:
    def x64() -> AbstractContextManager[Any]:
        import jax

        # Without 64-bit types JAX turns float64 into float32 and int64 positions into
        # int32; the context manager leaves the global setting as it was.
        scope: AbstractContextManager[Any] = jax.enable_x64(True)
        return scope

    load, from_bits = _asarray("jax.numpy")
    reason = _missing("jax", "JAX")
    device = "cpu" if reason else importlib.import_module("jax").default_backend()
    return Backend("jax", device, reason, load, from_bits, DTYPES, scope=x64)


def _dask_backend() -> Backend:
    def from_bits(bits: HostArray, name: str) -> Array:
        import dask.array as da

        # Two chunks along each of the first two axes (batch and sequence, or the
        # positions' own two axes): the blocks are rotated separately and joined.
        chunks = tuple(max(1, (n + 1) // 2) if axis < 2 else n for axis, n in enumerate(bits.shape))
        return da.from_array(_values(bits, name), chunks=chunks)

    load = partial(importlib.import_module, "array_api_compat.dask.array")
    return Backend("dask", "cpu", _missing("dask", "dask"), load, from_bits, _numpy_dtype_names())


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


def installed_version(distribution: str) -> str | None:
    """The version of ``distribution`` when its module can be imported, else ``None``."""
    if importlib.util.find_spec(distribution.replace("-", "_")) is None:
        return None
    if distribution == "cupy":  # CuPy's wheels are named per CUDA version (cupy-cuda12x)
        try:
            import cupy
        except Exception as error:  # a broken install is reported, not raised
            return f"installed, but import fails ({type(error).__name__})"
        return str(cupy.__version__)
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
