// Per-element arithmetic and index mapping of the anyrope RoPE kernel.
//
// Everything here is `__host__ __device__`: rope.cu wraps `rope_entry` in a
// __global__ function, and tests/cuda_harness/harness.cpp runs the very same
// function on the CPU for every (blockIdx.x, threadIdx.x) of a simulated grid,
// so a CPU-only test run compares the kernel's index mapping and rounding
// bitwise against the NumPy path (numerics.md, section 3).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#if defined(__CUDACC__)
#define ANYROPE_HD __host__ __device__ __forceinline__
#else
#define ANYROPE_HD inline
#endif

namespace anyrope {

// Compute (and table) type: float32 for the 16-bit formats, otherwise the input type.
template <typename T> struct compute_of { using type = T; };
template <> struct compute_of<__half> { using type = float; };
template <> struct compute_of<__nv_bfloat16> { using type = float; };

ANYROPE_HD float to_compute(__half x) { return __half2float(x); }
ANYROPE_HD float to_compute(__nv_bfloat16 x) { return __bfloat162float(x); }
ANYROPE_HD float to_compute(float x) { return x; }
ANYROPE_HD double to_compute(double x) { return x; }

template <typename T> ANYROPE_HD T from_compute(typename compute_of<T>::type x) { return x; }
template <> ANYROPE_HD __half from_compute<__half>(float x) { return __float2half_rn(x); }
template <> ANYROPE_HD __nv_bfloat16 from_compute<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// One IEEE operation each, rounded to nearest even, never contracted into an FMA, with
// subnormals kept.  CuPy appends -ftz=true to every NVRTC compile, which turns `a * b` and
// even `__fmul_rn` into `mul.rn.ftz.f32`; the float instructions are therefore written out
// in PTX, where no compiler flag adds `.ftz`, and an instruction with an explicit rounding
// mode is never fused.  The host build uses -ffp-contract=off and no fast-math flag.
ANYROPE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a * b;
#endif
}
ANYROPE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a + b;
#endif
}
ANYROPE_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a - b;
#endif
}
// Exact sign flip of a table entry; `-x` would become `neg.ftz.f32` under -ftz=true.
ANYROPE_HD float negate(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("neg.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return -x;
#endif
}
ANYROPE_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
ANYROPE_HD double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
ANYROPE_HD double sub_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
// float64 has no flush-to-zero mode in PTX.
ANYROPE_HD double negate(double x) { return -x; }

// y0 = x0*c - x1*s, y1 = x1*c + x0*s, in the compute type, rounded once to T.
template <typename T, typename C>
ANYROPE_HD void rotate_pair(T x0, T x1, C c, C s, T& y0, T& y1) {
  const C a0 = to_compute(x0);
  const C a1 = to_compute(x1);
  y0 = from_compute<T>(sub_rn(mul_rn(a0, c), mul_rn(a1, s)));
  y1 = from_compute<T>(add_rn(mul_rn(a1, c), mul_rn(a0, s)));
}

// 16 bytes moved by one load or store instruction.  On the device the instruction is
// written out: a copy of a 16-byte struct becomes a memcpy that the optimizer may split
// into four 4-byte stores (seen in the PTX of nvcc 13), which halves the store throughput.
ANYROPE_HD uint4 load16(const void* p) {
#if defined(__CUDA_ARCH__)
  uint4 r;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(__cvta_generic_to_global(p)));
  return r;
#else
  return *static_cast<const uint4*>(p);
#endif
}

// Tables are read-only for the whole launch: the non-coherent (read-only) cache path.
ANYROPE_HD uint4 load16_ro(const void* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const uint4*>(p));
#else
  return *static_cast<const uint4*>(p);
#endif
}

ANYROPE_HD void store16(void* p, uint4 v) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
               :
               : "l"(__cvta_generic_to_global(p)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#else
  *static_cast<uint4*>(p) = v;
#endif
}

template <typename T> union bits16 {
  uint4 u;
  T e[16 / sizeof(T)];
};

// N contiguous elements through 16-byte accesses; p is 16-byte aligned (checked on the host).
template <bool READ_ONLY, typename T, int N> ANYROPE_HD void load_vec(const T* p, T (&dst)[N]) {
  constexpr int per = 16 / static_cast<int>(sizeof(T));
  static_assert(N % per == 0, "vector width must be a whole number of 16-byte packs");
#pragma unroll
  for (int k = 0; k < N / per; ++k) {
    bits16<T> chunk;
    chunk.u = READ_ONLY ? load16_ro(p + k * per) : load16(p + k * per);
#pragma unroll
    for (int j = 0; j < per; ++j) dst[k * per + j] = chunk.e[j];
  }
}

template <typename T, int N> ANYROPE_HD void store_vec(T* p, const T (&src)[N]) {
  constexpr int per = 16 / static_cast<int>(sizeof(T));
  static_assert(N % per == 0, "vector width must be a whole number of 16-byte packs");
#pragma unroll
  for (int k = 0; k < N / per; ++k) {
    bits16<T> chunk;
#pragma unroll
    for (int j = 0; j < per; ++j) chunk.e[j] = src[k * per + j];
    store16(p + k * per, chunk.u);
  }
}

// One tensor (q or k) seen as (batch, seq, heads, dim) with element strides;
// the layout ("bshd", "bhsd", "sbhd") is only a permutation of these strides.
template <typename T> struct tensor_view {
  const T* in;
  T* out;
  long long heads;
  long long in_b, in_s, in_h, in_d;
  long long out_b, out_s, out_h, out_d;
  long long units;  // batch * seq * heads * units_per_row
};

template <typename C, typename P> struct shared_args {
  const C* cos_t;  // (table_rows, half), row = position
  const C* sin_t;
  const P* pos;    // nullptr: position = seq index + offset
  long long pos_b, pos_s;
  long long offset;
  long long seq;
  long long half;  // rotary_dim / 2
  long long tail;  // elements copied after the rotated ones (0 when in place)
  int inverse;
};

// Work units of one row: half/V rotated units of V pairs, then tail/V copied units of
// V elements.  V == 1 is the scalar variant (any strides, any alignment).
template <int V> ANYROPE_HD long long units_per_row(long long half, long long tail) {
  return half / V + tail / V;
}

// Unit `t` of one tensor: one division for the row, two more for (batch, seq, head).
template <typename T, int V, bool INTERLEAVED, typename C, typename P>
ANYROPE_HD void rope_unit(const tensor_view<T>& tv, const shared_args<C, P>& a, long long t) {
  const long long rot_units = a.half / V;
  const long long per_row = units_per_row<V>(a.half, a.tail);
  const long long row = t / per_row;
  const long long u = t - row * per_row;
  const long long bs = row / tv.heads;
  const long long h = row - bs * tv.heads;
  const long long b = bs / a.seq;
  const long long s = bs - b * a.seq;
  const T* src = tv.in + b * tv.in_b + s * tv.in_s + h * tv.in_h;
  T* dst = tv.out + b * tv.out_b + s * tv.out_s + h * tv.out_h;

  if (u >= rot_units) {
    const long long d0 = 2 * a.half + (u - rot_units) * V;
    if constexpr (V == 1) {
      dst[d0 * tv.out_d] = src[d0 * tv.in_d];
    } else {
      T tmp[V];
      load_vec<false>(src + d0, tmp);
      store_vec(dst + d0, tmp);
    }
    return;
  }

  const long long pos = (a.pos == nullptr ? s : static_cast<long long>(a.pos[b * a.pos_b + s * a.pos_s]))
                        + a.offset;
  const long long i0 = u * V;
  const C* crow = a.cos_t + pos * a.half + i0;
  const C* srow = a.sin_t + pos * a.half + i0;
  C c[V];
  C sn[V];
  if constexpr (V == 1) {
    c[0] = crow[0];
    sn[0] = srow[0];
  } else {
    load_vec<true>(crow, c);
    load_vec<true>(srow, sn);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (a.inverse) sn[j] = negate(sn[j]);
  }

  if constexpr (INTERLEAVED) {
    // Pairs (x[2i], x[2i+1]): V pairs are 2V contiguous elements.
    T x[2 * V];
    T y[2 * V];
    if constexpr (V == 1) {
      x[0] = src[(2 * i0) * tv.in_d];
      x[1] = src[(2 * i0 + 1) * tv.in_d];
    } else {
      load_vec<false>(src + 2 * i0, x);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) rotate_pair(x[2 * j], x[2 * j + 1], c[j], sn[j], y[2 * j], y[2 * j + 1]);
    if constexpr (V == 1) {
      dst[(2 * i0) * tv.out_d] = y[0];
      dst[(2 * i0 + 1) * tv.out_d] = y[1];
    } else {
      store_vec(dst + 2 * i0, y);
    }
  } else {
    // Half-split pairs (x[i], x[i + half]): one vector from each half.
    T x0[V];
    T x1[V];
    T y0[V];
    T y1[V];
    if constexpr (V == 1) {
      x0[0] = src[i0 * tv.in_d];
      x1[0] = src[(i0 + a.half) * tv.in_d];
    } else {
      load_vec<false>(src + i0, x0);
      load_vec<false>(src + i0 + a.half, x1);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) rotate_pair(x0[j], x1[j], c[j], sn[j], y0[j], y1[j]);
    if constexpr (V == 1) {
      dst[i0 * tv.out_d] = y0[0];
      dst[(i0 + a.half) * tv.out_d] = y1[0];
    } else {
      store_vec(dst + i0, y0);
      store_vec(dst + i0 + a.half, y1);
    }
  }
}

// The body of one CUDA thread: a grid-stride loop over the units of q, then of k,
// so that q and k (with different head counts) share one launch.
template <typename T, int V, bool INTERLEAVED, typename C, typename P>
ANYROPE_HD void rope_thread(const tensor_view<T>& q, const tensor_view<T>& k,
                            const shared_args<C, P>& a, long long block, long long thread,
                            long long block_dim, long long grid_dim) {
  const long long total = q.units + k.units;
  for (long long t = block * block_dim + thread; t < total; t += block_dim * grid_dim) {
    if (t < q.units) {
      rope_unit<T, V, INTERLEAVED>(q, a, t);
    } else {
      rope_unit<T, V, INTERLEAVED>(k, a, t - q.units);
    }
  }
}

// The flat kernel parameter list, in the order anyrope._paths.cuda.launch packs the arguments;
// rope.cu and the host harness both expand it, so they cannot disagree.
#define ANYROPE_PARAMS(T, C, P)                                                               \
  const T *q_in, T *q_out, long long q_heads, long long q_in_b, long long q_in_s,             \
      long long q_in_h, long long q_in_d, long long q_out_b, long long q_out_s,                \
      long long q_out_h, long long q_out_d, long long q_units, const T *k_in, T *k_out,        \
      long long k_heads, long long k_in_b, long long k_in_s, long long k_in_h,                 \
      long long k_in_d, long long k_out_b, long long k_out_s, long long k_out_h,               \
      long long k_out_d, long long k_units, const C *__restrict__ cos_t,                       \
      const C *__restrict__ sin_t, const P *__restrict__ pos, long long pos_b,                 \
      long long pos_s, long long offset, long long seq, long long half, long long tail,        \
      int inverse

#define ANYROPE_ARGS                                                                          \
  q_in, q_out, q_heads, q_in_b, q_in_s, q_in_h, q_in_d, q_out_b, q_out_s, q_out_h, q_out_d,   \
      q_units, k_in, k_out, k_heads, k_in_b, k_in_s, k_in_h, k_in_d, k_out_b, k_out_s,         \
      k_out_h, k_out_d, k_units, cos_t, sin_t, pos, pos_b, pos_s, offset, seq, half, tail,     \
      inverse

// One thread of a launch, from the flat parameters (q_in may equal q_out: in place).
template <typename T, int V, bool INTERLEAVED, typename P>
ANYROPE_HD void rope_entry(ANYROPE_PARAMS(T, typename compute_of<T>::type, P), long long block,
                           long long thread, long long block_dim, long long grid_dim) {
  using C = typename compute_of<T>::type;
  const tensor_view<T> q{q_in,    q_out,   q_heads, q_in_b,  q_in_s,  q_in_h,
                         q_in_d,  q_out_b, q_out_s, q_out_h, q_out_d, q_units};
  const tensor_view<T> k{k_in,    k_out,   k_heads, k_in_b,  k_in_s,  k_in_h,
                         k_in_d,  k_out_b, k_out_s, k_out_h, k_out_d, k_units};
  const shared_args<C, P> a{cos_t, sin_t, pos, pos_b, pos_s, offset, seq, half, tail, inverse};
  rope_thread<T, V, INTERLEAVED>(q, k, a, block, thread, block_dim, grid_dim);
}

}  // namespace anyrope
