"""xPos amplitudes, float64 on the host (the same bits on every machine).

xPos (Sun et al. 2022, arXiv 2212.10554) multiplies pair ``i`` of a query at position
``m`` by ``zeta_i ** ((m - center) / scale_base)`` and divides the same pair of a key by
it, so that a query-key product gains ``zeta_i ** ((m - n) / scale_base)``: a decay
with the distance only. The amplitude is folded into the cos/sin tables the way the
attention factor is (numerical-contract.rst, "How every path computes" 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._hostmath import Float64, power


@functools.cache
def xpos_zeta(rotary_dim: int) -> Float64:
    """``zeta_i = (2i + 0.4 d) / (1.4 d)`` for ``i = 0 .. d/2 - 1`` (``d = rotary_dim``),
    read-only float64.

    Written ``(10 i + 2 d) / (7 d)``, an exact fraction rounded once: no float ``0.4``
    or ``1.4`` enters.
    """
    zeta = np.array(
        [float(Fraction(10 * i + 2 * rotary_dim, 7 * rotary_dim)) for i in range(rotary_dim // 2)],
        dtype=np.float64,
    )
    zeta.flags.writeable = False
    return zeta


@dataclass(frozen=True)
class Amplitude:
    """``zeta_i ** (sign * (m - center) / scale_base)``: ``sign`` is +1 for queries,
    -1 for keys. Hashable and picklable (a table source's settings)."""

    rotary_dim: int
    scale_base: int
    center: int
    sign: int

    def __call__(self, positions: Float64) -> Float64:
        """The amplitudes of ``positions`` (float64 integers, shape ``(n,)``): ``(n, pairs)``.

        ``m - center`` is exact (both below 2**53) and the exponent stays a fraction
        of integers. Beyond the ``2**40`` that :func:`~anyrope._hostmath.power` states,
        its double-double exponent still holds to the ulp (``tests/test_xpos.py``
        measures it against mpmath); there the amplitude is 0 or inf for any practical
        width anyway.
        """
        exponent = self.sign * (positions - float(self.center))
        return power(xpos_zeta(self.rotary_dim)[None, :], exponent[:, None], self.scale_base)
