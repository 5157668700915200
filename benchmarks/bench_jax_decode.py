"""A jitted JAX decode step with traced positions: anyrope next to hand-gathered tables.

    python benchmarks/bench_jax_decode.py [--rounds 15] [--calls 200]

One new token per sequence, batch B in {1, 8}, the attention block of a small
Llama-like model (SmolLM-135M's shapes: hidden 576, 9 query heads and 3 key/value
heads of 64 features, base 10000) over a KV cache of 1024 positions (donated, updated
in place), float32 on the CPU. The positions, shape (B, 1), are an argument of the
jitted step (traced).

* ``hand``: cos/sin tables of 2048 positions precomputed as NumPy float64 rounded to
  float32, gathered in the graph with ``jnp.take``, then the same arithmetic as
  anyrope's reference, ``x0 * c - x1 * s`` and ``x1 * c + x0 * s`` on the half-split
  pairs.
* ``anyrope``: ``rope = anyrope.RoPE(64, max_positions=2048)``, ``rope(q, k, positions)``.

Each line times the rotation of q and k alone (``rope``) and the whole block
(``block``: projections, rotation, cache update, attention, output projection). Rounds
alternate the two; a sample is ``--calls`` calls; the table gives the median over the
rounds in microseconds per call, and anyrope's median over hand's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import anyrope

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, CACHE, CAPACITY = 576, 9, 3, 64, 1024, 2048


def hand_rope() -> Callable[..., tuple[jax.Array, jax.Array]]:
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = np.arange(CAPACITY)[:, None] * inv_freq
    cos_t, sin_t = (jnp.asarray(f(angles).astype(np.float32)) for f in (np.cos, np.sin))

    def rotate(q: jax.Array, k: jax.Array, positions: jax.Array) -> tuple[jax.Array, ...]:
        cos = jnp.take(cos_t, positions, axis=0)[:, :, None]
        sin = jnp.take(sin_t, positions, axis=0)[:, :, None]

        def one(x: jax.Array) -> jax.Array:
            x0, x1 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
            return jnp.concatenate((x0 * cos - x1 * sin, x1 * cos + x0 * sin), axis=-1)

        return one(q), one(k)

    return rotate


def block(rotate: Callable[..., tuple[jax.Array, jax.Array]]) -> Callable[..., object]:
    def step(h, weights, cache_k, cache_v, positions):  # type: ignore[no-untyped-def]
        wq, wk, wv, wo = weights
        b, group = h.shape[0], HEADS // KV_HEADS
        q = (h @ wq).reshape(b, 1, HEADS, HEAD_DIM)
        k = (h @ wk).reshape(b, 1, KV_HEADS, HEAD_DIM)
        v = (h @ wv).reshape(b, KV_HEADS, 1, HEAD_DIM)
        q, k = rotate(q, k, positions)
        at = positions[0, 0]
        keys = jax.lax.dynamic_update_slice(cache_k, k.reshape(v.shape), (0, 0, at, 0))
        values = jax.lax.dynamic_update_slice(cache_v, v, (0, 0, at, 0))
        q = q.reshape(b, KV_HEADS, group, HEAD_DIM)
        scores = jnp.einsum("bgqd,bgkd->bgqk", q, keys) / np.sqrt(HEAD_DIM)
        scores = jnp.where(jnp.arange(CACHE) <= at, scores, -jnp.inf)
        out = jnp.einsum("bgqk,bgkd->bgqd", jax.nn.softmax(scores, axis=-1), values)
        return out.reshape(b, 1, HEADS * HEAD_DIM) @ wo, keys, values

    return step


def sample(function: Callable[..., object], args: list[object], calls: int) -> float:
    """Microseconds per call over ``calls`` back-to-back calls (a block's updated caches,
    donated, are the next call's)."""
    start = time.perf_counter()
    for _ in range(calls):
        out = function(*args)
        if isinstance(out, tuple) and len(out) == 3:
            args[2:4] = out[1:]
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()
    rope = anyrope.RoPE(HEAD_DIM, max_positions=CAPACITY)
    rotations = {"hand": hand_rope(), "anyrope": rope}
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, float32, median us per call")
    print(f"{'B':>3} {'what':>6} {'hand':>9} {'anyrope':>9} {'ratio':>6}")
    for b in (1, 8):
        positions = jnp.full((b, 1), CACHE // 2, dtype=jnp.int32)
        q = jnp.asarray(rng.standard_normal((b, 1, HEADS, HEAD_DIM)), jnp.float32)
        k = jnp.asarray(rng.standard_normal((b, 1, KV_HEADS, HEAD_DIM)), jnp.float32)
        weights = tuple(
            jnp.asarray(rng.standard_normal(shape) / 24, jnp.float32)
            for shape in (
                (HIDDEN, HEADS * HEAD_DIM),
                (HIDDEN, KV_HEADS * HEAD_DIM),
                (HIDDEN, KV_HEADS * HEAD_DIM),
                (HEADS * HEAD_DIM, HIDDEN),
            )
        )
        cache = rng.standard_normal((b, KV_HEADS, CACHE, HEAD_DIM)).astype(np.float32)
        h = jnp.asarray(rng.standard_normal((b, 1, HIDDEN)), jnp.float32)
        cases = {
            "rope": {n: (jax.jit(r), [q, k, positions]) for n, r in rotations.items()},
            "block": {
                n: (
                    jax.jit(block(r), donate_argnums=(2, 3)),
                    [h, weights, jnp.asarray(cache), jnp.asarray(cache), positions],
                )
                for n, r in rotations.items()
            },
        }
        for what, pair in cases.items():
            times: dict[str, list[float]] = {name: [] for name in pair}
            for function, args in pair.values():
                sample(function, args, 5)  # compile and warm up
            for _ in range(options.rounds):
                for name, (function, args) in pair.items():
                    times[name].append(sample(function, args, options.calls))
            hand, ours = (statistics.median(times[n]) for n in ("hand", "anyrope"))
            print(f"{b:>3} {what:>6} {hand:>9.2f} {ours:>9.2f} {ours / hand:>6.2f}")


if __name__ == "__main__":
    main()
