"""Type aliases shared by the scaling modules."""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np

FloatArray: TypeAlias = np.ndarray[Any, np.dtype[np.float64]]

IntArray: TypeAlias = np.ndarray[Any, np.dtype[np.int64]]

# A method's (inv_freq, attention_factor): its float64 inverse frequencies and the factor that
# multiplies cos and sin.
Frequencies: TypeAlias = tuple[FloatArray, float]
