"""anyrope: rotary position embedding written once against the Python array API standard.

The same call gives the same bits on NumPy, PyTorch (CPU and CUDA), CuPy and any other
array-API library. See :func:`rotate`, :func:`rotate_qk` and :class:`RoPE`.
"""

from ._functional import rotate, rotate_qk
from ._rope import RoPE

__version__ = "0.1.0"

__all__ = ["RoPE", "__version__", "rotate", "rotate_qk"]
