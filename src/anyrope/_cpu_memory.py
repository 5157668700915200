"""Host memory of the CPU paths: how they view it, and new memory for their outputs
(NumPy arrays and torch CPU tensors)."""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
from typing import Any

import numpy as np

#: The NumPy dtype through which the CPU paths see each input dtype's memory.
STORAGE_DTYPES: dict[str, type[np.generic]] = {
    "float32": np.float32,
    "float64": np.float64,
    # Half types as 16-bit integers (NumPy has no bfloat16): the compiled path tells
    # float16 (unsigned) from bfloat16 (signed) by the integer type.
    "float16": np.uint16,
    "bfloat16": np.int16,
}

#: Outputs from this size on ask Linux for transparent huge pages, as NumPy does for its own
#: arrays: the first touch of a fresh tensor's 4 KiB pages cost more than the rotation itself
#: (19 ms against 4 ms to fill 64 MiB on the development machine).
HUGE_PAGE_BYTES = 4 << 20

_MADV_HUGEPAGE = 14


def host_rejects(library: str, device: object, requires_grad: bool) -> str | None:
    """Why a CPU path cannot take arrays of ``library`` on ``device`` (the phrase of a
    path's ``rejects``): only NumPy arrays and PyTorch CPU tensors, and no autograd."""
    if library not in ("numpy", "torch") or str(device) != "cpu":
        return f"needs NumPy arrays or PyTorch CPU tensors; got {library} arrays on device {device}"
    if requires_grad:
        return (
            "does not record autograd; use impl='auto' or 'array_api' for tensors that require "
            "grad, and in forward mode (torch.func.jvp, forward_ad.dual_level)"
        )
    return None


def empty_like(x: Any) -> Any:
    """A new C-contiguous array of the library, shape and dtype of ``x`` (a NumPy array or
    a torch CPU tensor); a large tensor is backed by transparent huge pages where Linux
    offers them."""
    if isinstance(x, np.ndarray):
        return np.empty_like(x, order="C")
    import torch

    out = torch.empty(tuple(x.shape), dtype=x.dtype)
    size = out.numel() * out.element_size()
    if size >= HUGE_PAGE_BYTES and sys.platform == "linux":
        page = mmap.PAGESIZE
        start = -(-out.data_ptr() // page) * page
        stop = (out.data_ptr() + size) // page * page
        # Advice only: where it is refused (THP off, an old kernel) nothing changes.
        _libc().madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start), _MADV_HUGEPAGE)
    return out


@functools.cache  # loaded once, on first use
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)
