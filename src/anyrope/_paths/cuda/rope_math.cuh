// Per-element arithmetic and index mapping of the anyrope RoPE kernel.
//
// Everything here is `__host__ __device__`: rope.cu wraps `rope_entry` in a
// __global__ function, and tests/cuda_harness/harness.cpp runs the very same
// function on the CPU for every (blockIdx, threadIdx) of a simulated 3-D grid,
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

// B bytes (16, 8, 4 or 2) moved by one load or store instruction.
template <int B> struct chunk_of;
template <> struct chunk_of<16> { using type = uint4; };
template <> struct chunk_of<8> { using type = uint2; };
template <> struct chunk_of<4> { using type = unsigned int; };
template <> struct chunk_of<2> { using type = unsigned short; };

// On the device the instruction is written out: a copy of a 16-byte struct becomes a
// memcpy that the optimizer may split into four 4-byte stores (seen in the PTX of nvcc 13),
// which halves the store throughput.  `volatile` keeps the loads of x ahead of the
// position and table loads in the PTX.  They are relaxed (strong) loads at GPU scope
// because ptxas keeps strong loads in program order and moves weak ones freely: with weak
// loads, every vector variant's SASS (NVRTC 13.0 and 13.5, sm_90) issued the loads of x
// only after the position had arrived, two trips to memory in a row
// (tests/test_cuda_sass.py).  Each byte of x is read once, so skipping L1 (as strong
// loads do) leaves L1 to the table rows; the two accesses of a 16-bit interleaved unit
// share their 32-byte sectors, which the L2 then serves twice (measured: loads at CTA
// scope gained nothing, docs/performance.rst, "GPU"); float32 reads them split.
template <int B>
ANYROPE_HD typename chunk_of<B>::type load_chunk(const void* p, bool live = true) {
  typename chunk_of<B>::type r{};
#if defined(__CUDA_ARCH__)
  // `live` is a predicate on the instruction, not a branch, for the same reason.
  const size_t g = __cvta_generic_to_global(p);
  const unsigned on = live;
  if constexpr (B == 16) {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %5, 0;\n\t"
        "@on ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
        : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)
        : "l"(g), "r"(on));
  } else if constexpr (B == 8) {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %3, 0;\n\t"
        "@on ld.relaxed.gpu.global.v2.u32 {%0, %1}, [%2];\n\t}"
        : "+r"(r.x), "+r"(r.y)
        : "l"(g), "r"(on));
  } else if constexpr (B == 4) {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %2, 0;\n\t"
        "@on ld.relaxed.gpu.global.u32 %0, [%1];\n\t}"
        : "+r"(r)
        : "l"(g), "r"(on));
  } else {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %2, 0;\n\t"
        "@on ld.global.u16 %0, [%1];\n\t}"
        : "+h"(r)
        : "l"(g), "r"(on));
  }
#else
  if (live) __builtin_memcpy(&r, p, B);
#endif
  return r;
}

// Tables are read-only for the whole launch: the non-coherent (read-only) cache path.
template <int B> ANYROPE_HD typename chunk_of<B>::type load_chunk_ro(const void* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(static_cast<const typename chunk_of<B>::type*>(p));
#else
  typename chunk_of<B>::type r;
  __builtin_memcpy(&r, p, B);
  return r;
#endif
}

// A store that is not `live` writes nothing; a predicate on the instruction, not a branch,
// so that the code of a unit stays one straight line.
template <int B>
ANYROPE_HD void store_chunk(void* p, typename chunk_of<B>::type v, bool live = true) {
#if defined(__CUDA_ARCH__)
  const size_t g = __cvta_generic_to_global(p);
  const unsigned on = live;
  if constexpr (B == 16) {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %5, 0;\n\t"
        "@on st.global.v4.u32 [%0], {%1, %2, %3, %4};\n\t}"
        :
        : "l"(g), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(on)
        : "memory");
  } else if constexpr (B == 8) {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %3, 0;\n\t"
        "@on st.global.v2.u32 [%0], {%1, %2};\n\t}"
        :
        : "l"(g), "r"(v.x), "r"(v.y), "r"(on)
        : "memory");
  } else if constexpr (B == 4) {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %2, 0;\n\t@on st.global.u32 [%0], %1;\n\t}"
        :
        : "l"(g), "r"(v), "r"(on)
        : "memory");
  } else {
    asm volatile(
        "{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %2, 0;\n\t@on st.global.u16 [%0], %1;\n\t}"
        :
        : "l"(g), "h"(v), "r"(on)
        : "memory");
  }
#else
  if (live) __builtin_memcpy(p, &v, B);
#endif
}

// The block's table rows in shared memory (plain accesses; the pointer is B-byte aligned).
template <int B> ANYROPE_HD typename chunk_of<B>::type load_shared(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const typename chunk_of<B>::type*>(p);
#else
  typename chunk_of<B>::type r;
  __builtin_memcpy(&r, p, B);
  return r;
#endif
}
template <int B> ANYROPE_HD void store_shared(void* p, typename chunk_of<B>::type v) {
#if defined(__CUDA_ARCH__)
  *static_cast<typename chunk_of<B>::type*>(p) = v;
#else
  __builtin_memcpy(p, &v, B);
#endif
}

// Where load_vec reads: global memory (strong, predicated), the tables through the
// read-only cache, or shared memory.
enum class From { global, table, shared };

// The barrier of a block's threads.  The host harness (tests/cuda_harness) runs the threads
// of a block as fibers and defines host_barrier: it switches to the next fiber and checks
// that every thread of the block waits at the same barrier (`id`) before any goes on.
enum Barrier { kRowsRead = 1, kRowsStaged = 2 };
#if defined(__CUDA_ARCH__)
ANYROPE_HD void block_barrier(Barrier) { __syncthreads(); }
#else
void host_barrier(int id);
ANYROPE_HD void block_barrier(Barrier id) { host_barrier(id); }
#endif

template <typename E, int B> union pack {
  typename chunk_of<B>::type u;
  E e[B / sizeof(E)];
};

// N contiguous elements in B-byte accesses; p is B-byte aligned (checked on the host).
// A load that is not `live` leaves zero bits (the x of a head past the last).
template <From FROM, int B, typename E, int N>
ANYROPE_HD void load_vec(const E* p, E (&dst)[N], bool live = true) {
  constexpr int per = B / static_cast<int>(sizeof(E));
  static_assert(per >= 1 && N % per == 0, "a whole number of B-byte accesses");
#pragma unroll
  for (int k = 0; k < N / per; ++k) {
    pack<E, B> chunk;
    chunk.u = FROM == From::table    ? load_chunk_ro<B>(p + k * per)
              : FROM == From::shared ? load_shared<B>(p + k * per)
                                     : load_chunk<B>(p + k * per, live);
#pragma unroll
    for (int j = 0; j < per; ++j) dst[k * per + j] = chunk.e[j];
  }
}

template <int B, bool SHARED = false, typename E, int N>
ANYROPE_HD void store_vec(E* p, const E (&src)[N], bool live = true) {
  constexpr int per = B / static_cast<int>(sizeof(E));
  static_assert(per >= 1 && N % per == 0, "a whole number of B-byte accesses");
#pragma unroll
  for (int k = 0; k < N / per; ++k) {
    pack<E, B> chunk;
#pragma unroll
    for (int j = 0; j < per; ++j) chunk.e[j] = src[k * per + j];
    if constexpr (SHARED) {
      store_shared<B>(p + k * per, chunk.u);
    } else {
      store_chunk<B>(p + k * per, chunk.u, live);
    }
  }
}

// One tensor (q or k) seen as (batch, seq, heads, dim) with element strides;
// the layout ("bshd", "bhsd", "sbhd") is only a permutation of these strides.
template <typename T, typename I> struct tensor_view {
  const T* in;
  T* out;
  I in_b, in_s, in_h, in_d;
  I out_b, out_s, out_h, out_d;
};

template <typename C, typename I> struct shared_args {
  const C* cos_t;   // (table_rows, half), row = position
  const C* sin_t;
  const void* pos;  // int or long long (pos_size 4 or 8); pos_size 0: position = s + offset
  I offset;
  I rows;           // a position array's values must be below it (at most the table rows)
  I pos_b, pos_s;
  I batch;          // the batch axes, collapsed into one
  I seq;
  I q_heads;        // heads 0 .. q_heads - 1 are q's, the rest k's
  I heads;          // q_heads + k_heads
  I half;           // rotary_dim / 2
  I units;          // work units of one (token, head) row: half / V rotated, then the copies
  int pos_size;
  int inverse;
};

// A quiet NaN: what the tables give a position they do not hold.
template <typename C> ANYROPE_HD C quiet_nan();
template <> ANYROPE_HD float quiet_nan<float>() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7fc00000);
#else
  return __builtin_nanf("");
#endif
}
template <> ANYROPE_HD double quiet_nan<double>() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff8000000000000LL);
#else
  return __builtin_nan("");
#endif
}

// The table row of token (b, s), and whether the tables hold it.  A positions array is
// read here and nowhere else: the host does not wait for the device to check it, so a
// position outside 0 .. rows - 1 is caught here, compared in 64 bits before any narrowing.
// On the device the position is a predicated load, strong like the loads of x (see
// load_chunk), so that ptxas issues it after them and before anything uses either, with no
// branch in between (ptxas also sinks loads past a branch): x and the position are in
// flight together, the table rows the position selects follow.
template <typename C, typename I>
ANYROPE_HD bool table_row(const shared_args<C, I>& a, I b, I s, I& row) {
  const long long at = static_cast<long long>(b * a.pos_b + s * a.pos_s) * a.pos_size;
  const long long by_offset = static_cast<long long>(s) + static_cast<long long>(a.offset);
  long long p;
#if defined(__CUDA_ARCH__)
  asm volatile(
      "{\n\t.reg .pred is4, is8;\n\t.reg .s32 narrow;\n\t"
      "setp.eq.s32 is4, %2, 4;\n\tsetp.eq.s32 is8, %2, 8;\n\tmov.b64 %0, %3;\n\t"
      "@is4 ld.relaxed.gpu.global.s32 narrow, [%1];\n\t@is4 cvt.s64.s32 %0, narrow;\n\t"
      "@is8 ld.relaxed.gpu.global.s64 %0, [%1];\n\t}"
      : "=l"(p)
      : "l"(__cvta_generic_to_global(static_cast<const char*>(a.pos) + at)), "r"(a.pos_size),
        "l"(by_offset));
#else
  const char* at_ptr = static_cast<const char*>(a.pos) + at;
  p = a.pos_size == 4   ? static_cast<long long>(*reinterpret_cast<const int*>(at_ptr))
      : a.pos_size == 8 ? *reinterpret_cast<const long long*>(at_ptr)
                        : by_offset;
#endif
  // `|` and `&`, not `||` and `&&`: no short circuit, no branch.
  const bool held = (a.pos_size == 0) | ((p >= 0) & (p < static_cast<long long>(a.rows)));
  row = held ? static_cast<I>(p) : I(0);
  return held;
}

// Heads per thread, by the size of an element and the pairing.  A thread rotates the same
// pairs of one token in R heads: it reads its table rows once for all R, and has R times
// the bytes of x in flight (the launch model in docs/performance.rst).  Set by the host
// (geometry.HEADS_PER_THREAD and INTERLEAVED_HEADS_PER_THREAD), which sizes the grid by it.
#if !defined(ANYROPE_HEADS_PER_THREAD_2) || !defined(ANYROPE_HEADS_PER_THREAD_4) ||   \
    !defined(ANYROPE_HEADS_PER_THREAD_8) ||                                           \
    !defined(ANYROPE_INTERLEAVED_HEADS_PER_THREAD_2) ||                               \
    !defined(ANYROPE_INTERLEAVED_HEADS_PER_THREAD_4) ||                               \
    !defined(ANYROPE_INTERLEAVED_HEADS_PER_THREAD_8)
#error "compile with -DANYROPE_[INTERLEAVED_]HEADS_PER_THREAD_<itemsize> (anyrope._paths.cuda.geometry)"
#endif
template <int BYTES, bool INTERLEAVED> struct heads_per_thread;
template <> struct heads_per_thread<2, false> { static constexpr int value = ANYROPE_HEADS_PER_THREAD_2; };
template <> struct heads_per_thread<4, false> { static constexpr int value = ANYROPE_HEADS_PER_THREAD_4; };
template <> struct heads_per_thread<8, false> { static constexpr int value = ANYROPE_HEADS_PER_THREAD_8; };
template <> struct heads_per_thread<2, true> { static constexpr int value = ANYROPE_INTERLEAVED_HEADS_PER_THREAD_2; };
template <> struct heads_per_thread<4, true> { static constexpr int value = ANYROPE_INTERLEAVED_HEADS_PER_THREAD_4; };
template <> struct heads_per_thread<8, true> { static constexpr int value = ANYROPE_INTERLEAVED_HEADS_PER_THREAD_8; };
template <typename T, bool INTERLEAVED>
constexpr int kHeadsPerThread = heads_per_thread<sizeof(T), INTERLEAVED>::value;

// Unit u of the rows (b, s, first + r * step), r < R, of q and k: V pairs rotated (the
// first half / V units of a row) or, past them, the next 2V features past the rotated
// width copied as they are (one feature in the scalar variant), so that one launch, and
// one warp, reads and writes each row whole (docs/performance.rst, "Partial rotary").
// Both kinds run the same instructions, each store predicated on the unit's kind: two
// loads of x, its stores as read (a copied unit), the rotation and its stores (a rotated
// unit), so no warp runs two branches one after the other, each with its trip to memory.
// A head past the last, a token past seq or a unit past the row is not live: not read,
// not written.  V == 1 is the scalar variant (any strides, any alignment); V > 1 moves V
// elements per access.
//
// STAGED: the table rows of the block's tokens go through shared memory, V cos then V sin
// entries per unit (threadIdx.x) of each token (threadIdx.z), `rows` the unit's; staged by
// the threads of the first head row (threadIdx.y == 0, whose first head is always live),
// which alone read the positions; the other head rows read them there.  The L2 so serves a
// token's table rows once per block instead of once per head row (docs/performance.rst,
// "GPU").  Every thread of the block comes here as often as the others, for the barriers.
// Unstaged, a thread reads its own rows, with no barrier.
template <typename T, int V, bool INTERLEAVED, bool STAGED, typename C, typename I>
ANYROPE_HD void rope_unit(const tensor_view<T, I>& q, const tensor_view<T, I>& k,
                          const shared_args<C, I>& a, C* rows, bool stager, bool reused,
                          bool unit_live, I b, I s, I first, I step, I u) {
  constexpr int R = kHeadsPerThread<T, INTERLEAVED>;
  constexpr int XB = V * static_cast<int>(sizeof(T));  // bytes of one x access
  constexpr int CB = V * static_cast<int>(sizeof(C)) < 16 ? V * static_cast<int>(sizeof(C)) : 16;
  const T* src[R];
  T* dst[R];
  I in_d[R];
  I out_d[R];
  bool live[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const I wanted = first + r * step;
    live[r] = unit_live & (wanted < a.heads);
    // A row that is not live points at a head that exists: `first` unstaged (a thread
    // with no live head skipped the unit), head 0 of q staged.
    const I h = live[r] ? wanted : STAGED ? I(0) : first;
    // Field by field, the view of q or of k: no second copy of the code below.
    const bool is_q = h < a.q_heads;
    const tensor_view<T, I> tv = is_q ? q : k;
    const I head = is_q ? h : h - a.q_heads;
    src[r] = tv.in + (b * tv.in_b + s * tv.in_s + head * tv.in_h);
    dst[r] = tv.out + (b * tv.out_b + s * tv.out_s + head * tv.out_h);
    in_d[r] = tv.in_d;
    out_d[r] = tv.out_d;
  }

  // The two accesses of x, at e0 and e1: (x[i], x[i + half]) for half-split pairs, the
  // 2V contiguous features of V interleaved pairs, the 2V features a copied unit moves.
  // SPLIT (float32 interleaved pairs): V features at i0 and V at i0 + half, V / 2 pairs
  // each, as half-split pairs are read, so that each access of a warp covers whole 32-byte
  // sectors; contiguous, each of the two accesses took every other 16 bytes of the same
  // sectors, which the L2 then served twice (0.88 of a copy; split, with four heads per
  // thread, 0.99 on an H200). 16-bit pairs read contiguous ran faster (0.97 against 0.83).
  constexpr bool SPLIT = INTERLEAVED && V > 1 && sizeof(T) == 4;
  const I rot_units = a.half / V;
  const bool rotates = u < rot_units;
  const I i0 = rotates ? u * V : I(0);  // a copied unit reads (and drops) unit 0's rows
  const I e0 = rotates ? (INTERLEAVED && !SPLIT ? 2 * i0 : i0)
                       : 2 * a.half + (u - rot_units) * (V == 1 ? 1 : 2 * V);
  const I e1 = rotates && (SPLIT || !INTERLEAVED) ? i0 + a.half : e0 + V;
  // The scalar variant copies one feature per unit: an odd number may follow the rotation.
  const bool both = rotates | (V > 1);
  // x first: its address does not depend on the position, so its loads are in flight
  // while the position, and then the table rows it selects, are fetched and staged.
  T x[R][2][V];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (V == 1) {
      x[r][0][0] = live[r] ? src[r][e0 * in_d[r]] : T{};
      x[r][1][0] = live[r] & both ? src[r][e1 * in_d[r]] : T{};
    } else {
      load_vec<From::global, XB>(src[r] + e0, x[r][0], live[r]);
      load_vec<From::global, XB>(src[r] + e1, x[r][1], live[r]);
    }
  }

  C c[V];
  C sn[V];
  // The rows are overwritten only once every thread has read the last ones.
  if (STAGED & reused) block_barrier(kRowsRead);
  // Unstaged, every thread reads its rows, with no branch (ptxas would wait for x before
  // it: a unit past the row reads those of unit 0).
  if (!STAGED || (stager & unit_live & rotates)) {
    I row;
    const bool held = table_row(a, b, s, row);
    // Staged: strong loads, as x, which ptxas keeps in program order, so that the sin row
    // is not fetched only after the cos row has been stored (seen with read-only loads:
    // two trips to memory before the barrier); a block reads a row once.  Unstaged: the
    // read-only cache, where the head rows of a token find its rows (strong loads skip
    // L1: 0.86 of a copy instead of 0.93, interleaved bfloat16 on the H200).
    constexpr From ROWS = STAGED ? From::global : From::table;
    if constexpr (SPLIT) {
      // The pairs from i0 / 2 on (the access at e0) and from (half + i0) / 2 on (at e1).
      constexpr int H = V / 2;
      constexpr int HB = H * static_cast<int>(sizeof(C));
      const I lo = row * a.half + i0 / 2;
      const I hi = lo + a.half / 2;
      C part[4][H];
      load_vec<ROWS, HB>(a.cos_t + lo, part[0]);
      load_vec<ROWS, HB>(a.cos_t + hi, part[1]);
      load_vec<ROWS, HB>(a.sin_t + lo, part[2]);
      load_vec<ROWS, HB>(a.sin_t + hi, part[3]);
#pragma unroll
      for (int j = 0; j < H; ++j) {
        c[j] = part[0][j];
        c[H + j] = part[1][j];
        sn[j] = part[2][j];
        sn[H + j] = part[3][j];
      }
    } else {
      load_vec<ROWS, CB>(a.cos_t + (row * a.half + i0), c);
      load_vec<ROWS, CB>(a.sin_t + (row * a.half + i0), sn);
    }
    if (!held) {
      // Row 0 was read instead; NaN tables make every rotated feature of the token NaN.
#pragma unroll
      for (int j = 0; j < V; ++j) c[j] = sn[j] = quiet_nan<C>();
    }
    if (a.inverse) {
#pragma unroll
      for (int j = 0; j < V; ++j) sn[j] = negate(sn[j]);
    }
    if constexpr (STAGED) {
      store_vec<CB, true>(rows, c);
      store_vec<CB, true>(rows + V, sn);
    }
  }
  // A copied unit stores its x as read, here: it arrives with the x of the others, and
  // is not held past the rotation (a select of x or the rotation at the stores held both:
  // 10 more registers in bfloat16, one block per SM less).
  const bool copies = !rotates;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (V == 1) {
      if (live[r] & copies) dst[r][e0 * out_d[r]] = x[r][0][0];
    } else {
      store_vec<XB>(dst[r] + e0, x[r][0], live[r] & copies);
      store_vec<XB>(dst[r] + e1, x[r][1], live[r] & copies);
    }
  }
  if constexpr (STAGED) {
    block_barrier(kRowsStaged);
    load_vec<From::shared, CB>(rows, c);
    load_vec<From::shared, CB>(rows + V, sn);
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    T y[2][V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if constexpr (INTERLEAVED) {
        // Pair j is features 2j and 2j + 1 of the 2V read (split: of the V at e0, then
        // the V at e1).
        const int lo = 2 * j;
        const int hi = lo + 1;
        rotate_pair(x[r][lo / V][lo % V], x[r][hi / V][hi % V], c[j], sn[j], y[lo / V][lo % V],
                    y[hi / V][hi % V]);
      } else {
        rotate_pair(x[r][0][j], x[r][1][j], c[j], sn[j], y[0][j], y[1][j]);
      }
    }
    if constexpr (V == 1) {
      if (live[r] & rotates) {
        dst[r][e0 * out_d[r]] = y[0][0];
        dst[r][e1 * out_d[r]] = y[1][0];
      }
    } else {
      store_vec<XB>(dst[r] + e0, y[0], live[r] & rotates);
      store_vec<XB>(dst[r] + e1, y[1], live[r] & rotates);
    }
  }
}

// The body of one CUDA thread.  The grid is 3-D with no division anywhere: threadIdx.x
// walks the units of one (token, head) row, threadIdx.y the heads (q's, then k's, so
// that both share one launch; a thread takes R of them, blockDim.y apart, so that the
// threads of a warp read adjacent rows at each step), threadIdx.z the tokens of a tile
// along seq; blockIdx.x the seq tiles, blockIdx.y the (collapsed) batch, blockIdx.z the
// groups of heads.  Every dimension is a stride loop, so any grid covers any geometry;
// the host sizes the grid so that each loop runs once.  `shared`: the launch's dynamic
// shared memory, blockDim.z * blockDim.x * V * 2 entries of C (geometry.launch_templates
// sizes it).
//
// Half-split pairs: every loop runs as often in each thread of a block (what a thread
// does not hold is not live), so that all of them meet at each barrier of the staging.
// Interleaved pairs stage nothing: a thread reads its own rows, through the read-only
// cache, and skips what it does not hold.  Staged (in the turns of the loops that a whole
// block takes, or in every turn with the loops above) they ran at 0.75 of a copy, and
// unstaged at 0.89 with one head per thread, 0.97 with two (bfloat16 prefill on an H200,
// benchmarks/bench_gpu_launch.py; docs/performance.rst, "GPU").
template <typename T, int V, bool INTERLEAVED, typename C, typename I>
ANYROPE_HD void rope_thread(const tensor_view<T, I>& q, const tensor_view<T, I>& k,
                            const shared_args<C, I>& a, C* shared, uint3 block, uint3 thread,
                            uint3 block_dim, uint3 grid_dim) {
  const I step = static_cast<I>(block_dim.y);
  const I per_group = step * kHeadsPerThread<T, INTERLEAVED>;
  const I tile_seq = static_cast<I>(block_dim.z);
  const I across = static_cast<I>(block_dim.x);
  C* const rows = shared + (static_cast<I>(thread.z) * across + static_cast<I>(thread.x)) * 2 * V;
  const bool stager = thread.y == 0;
  bool reused = false;
  for (I g = static_cast<I>(block.z); g * per_group < a.heads; g += static_cast<I>(grid_dim.z)) {
    const I first = g * per_group + static_cast<I>(thread.y);
    if (INTERLEAVED && first >= a.heads) continue;
    for (I b = static_cast<I>(block.y); b < a.batch; b += static_cast<I>(grid_dim.y)) {
      for (I tile = static_cast<I>(block.x); tile * tile_seq < a.seq;
           tile += static_cast<I>(grid_dim.x)) {
        const I s = tile * tile_seq + static_cast<I>(thread.z);
        if (INTERLEAVED && s >= a.seq) continue;
        for (I u0 = INTERLEAVED ? static_cast<I>(thread.x) : I(0); u0 < a.units; u0 += across) {
          if constexpr (INTERLEAVED) {
            rope_unit<T, V, true, false>(q, k, a, rows, false, false, true, b, s, first, step, u0);
          } else {
            const I u = u0 + static_cast<I>(thread.x);
            const bool live = (s < a.seq) & (u < a.units);
            rope_unit<T, V, false, true>(q, k, a, rows, stager, reused, live, b, live ? s : I(0),
                                         first, step, live ? u : I(0));
            reused = true;
          }
        }
      }
    }
  }
}

// The flat kernel parameter list, in the order anyrope._paths.cuda.launches packs the
// arguments: the seven pointers, the table offset, then the integers of one geometry;
// rope.cu and the host harness both expand it, so they cannot disagree.
#define ANYROPE_PARAMS(T, C, I)                                                              \
  const T *q_in, T *q_out, const T *k_in, T *k_out, const C *__restrict__ cos_t,              \
      const C *__restrict__ sin_t, const void *__restrict__ pos, I offset, I rows, I q_in_b,  \
      I q_in_s, I q_in_h, I q_in_d, I q_out_b, I q_out_s, I q_out_h, I q_out_d, I k_in_b,     \
      I k_in_s, I k_in_h, I k_in_d, I k_out_b, I k_out_s, I k_out_h, I k_out_d, I pos_b,      \
      I pos_s, I batch, I seq, I q_heads, I heads, I half, I units, int pos_size,             \
      int inverse

#define ANYROPE_ARGS                                                                         \
  q_in, q_out, k_in, k_out, cos_t, sin_t, pos, offset, rows, q_in_b, q_in_s, q_in_h, q_in_d,  \
      q_out_b, q_out_s, q_out_h, q_out_d, k_in_b, k_in_s, k_in_h, k_in_d, k_out_b, k_out_s,   \
      k_out_h, k_out_d, pos_b, pos_s, batch, seq, q_heads, heads, half, units, pos_size,      \
      inverse

// One thread of a launch, from the flat parameters (q_in may equal q_out: in place).
// I is the index type: int when every offset of the launch fits (checked on the host).
template <typename T, int V, bool INTERLEAVED, typename I>
ANYROPE_HD void rope_entry(ANYROPE_PARAMS(T, typename compute_of<T>::type, I), void* shared,
                           uint3 block, uint3 thread, uint3 block_dim, uint3 grid_dim) {
  using C = typename compute_of<T>::type;
  const tensor_view<T, I> q{q_in, q_out, q_in_b, q_in_s, q_in_h, q_in_d,
                            q_out_b, q_out_s, q_out_h, q_out_d};
  const tensor_view<T, I> k{k_in, k_out, k_in_b, k_in_s, k_in_h, k_in_d,
                            k_out_b, k_out_s, k_out_h, k_out_d};
  const shared_args<C, I> a{cos_t, sin_t, pos, offset, rows, pos_b, pos_s, batch, seq,
                            q_heads, heads, half, units, pos_size, inverse};
  rope_thread<T, V, INTERLEAVED>(q, k, a, static_cast<C*>(shared), block, thread, block_dim,
                                 grid_dim);
}

}  // namespace anyrope
