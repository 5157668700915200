"""RoPE on JAX arrays, eager and under ``jax.jit``.

Eagerly, JAX gives the same bits as NumPy (the numerical contract); under ``jit`` on the
CPU too, when numba is installed (XLA calls anyrope's kernel). Without numba the XLA
compiler may fuse ``a*b - c*d`` into fused multiply-adds, so results may differ by about
one float32 ulp; the script checks what applies.

Run: ``python examples/jax_jit.py`` (needs JAX; skips without it).
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import anyrope


def ulp_difference(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> float:
    """Largest difference in float32 ulp at the magnitude of each input pair.

    A rotation's rounding error scales with its input, not with its output (which can
    cancel to nearly zero), so the ulp is taken at ``hypot(x0, x1)`` of the pair.
    """
    half = x.shape[-1] // 2
    magnitude = np.hypot(x[..., :half], x[..., half:])
    ulp = np.spacing(np.concatenate([magnitude, magnitude], axis=-1))
    return float((np.abs(a - b) / ulp).max())


def main() -> int:
    if importlib.util.find_spec("jax") is None:
        print("skipped: JAX is not installed")
        return 0
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    q_host = rng.standard_normal((2, 64, 8, 64)).astype(np.float32)
    k_host = rng.standard_normal((2, 64, 2, 64)).astype(np.float32)
    q, k = jnp.asarray(q_host), jnp.asarray(k_host)
    rope = anyrope.RoPE(64, base=10000.0)

    q_eager, k_eager = rope(q, k, 10)
    q_ref, _ = rope(q_host, k_host, 10)
    assert isinstance(q_eager, jax.Array)
    assert np.array_equal(np.asarray(q_eager), q_ref), "eager JAX differs from NumPy"

    # The offset is a Python int, static under jit: the tables are built on the host
    # once, when the function is traced.
    step = jax.jit(lambda q, k: rope(q, k, 10))
    q_jit, k_jit = step(q, k)
    assert ulp_difference(np.asarray(q_jit), q_ref, q_host) <= 1.0
    assert ulp_difference(np.asarray(k_jit), np.asarray(k_eager), k_host) <= 1.0
    differing = int((np.asarray(q_jit) != q_ref).sum())
    if importlib.util.find_spec("numba") is not None:
        assert differing == 0, "jitted JAX differs from NumPy"

    print(
        f"JAX {jax.__version__}: eager identical to NumPy; under jit {differing} of "
        f"{q_ref.size} values differ (by at most one ulp)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
