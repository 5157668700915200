"""Rotary position embedding written once against the Python array API standard.

The same call gives the same bits on NumPy, PyTorch (CPU and CUDA), CuPy and any other
array-API library. See :func:`rotate`, :func:`rotate_qk`, :class:`RoPE` and :class:`XPos`.
"""

from ._functional import cache_nbytes, clear_cache, rotate, rotate_qk, rotate_qkv
from ._offsets import Offsets
from ._rope import RoPE, XPos
from ._weights import permute_qk_weights
from .attention import attention
from .linear_attention import linear_attention
from .scaling import RopeScaling
from .sinusoidal import sinusoidal

__version__ = "0.1.0"

__all__ = [
    "Offsets",
    "RoPE",
    "RopeScaling",
    "XPos",
    "__version__",
    "attention",
    "cache_nbytes",
    "clear_cache",
    "linear_attention",
    "permute_qk_weights",
    "rotate",
    "rotate_qk",
    "rotate_qkv",
    "sinusoidal",
]
