// Runs the anyrope CUDA kernel body on the CPU over a simulated grid.
//
// Built by tests/test_cuda_source.py as a shared library with g++ -ffp-contract=off
// against src/anyrope/_paths/cuda/rope_math.cuh, the header that rope.cu includes, and called
// through ctypes in place of the CuPy launch: the very same index mapping and rounding,
// run for every (blockIdx, threadIdx) of the 3-D grid in order on host memory, with the arguments
// that anyrope._paths.cuda.dispatch packed for the device (pointers are host addresses here).
#include <cfloat>
#include <cstdint>

#include "rope_math.cuh"

// NumPy keeps subnormals and rounds every operation to nearest even; so must the host build.
#if defined(__FAST_MATH__)
#error "the harness must be built without -ffast-math: it flushes subnormals and reorders math"
#endif

namespace {

constexpr int kParams = 36;

template <typename T> T* ptr(long long address) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

// Every thread of every block, in order: blocks (x fastest), then threads (x fastest).
template <typename T, int V, bool INTERLEAVED, typename I>
void run(const long long* a, const unsigned* grid, const unsigned* block) {
  using C = typename anyrope::compute_of<T>::type;
  const uint3 grid_dim{grid[0], grid[1], grid[2]};
  const uint3 block_dim{block[0], block[1], block[2]};
  const auto i = [a](int n) { return static_cast<I>(a[n]); };
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = 0; bx < grid[0]; ++bx)
        for (unsigned tz = 0; tz < block[2]; ++tz)
          for (unsigned ty = 0; ty < block[1]; ++ty)
            for (unsigned tx = 0; tx < block[0]; ++tx) {
              anyrope::rope_entry<T, V, INTERLEAVED, I>(
                  ptr<const T>(a[0]), ptr<T>(a[1]), ptr<const T>(a[2]), ptr<T>(a[3]),
                  ptr<const C>(a[4]), ptr<const C>(a[5]), ptr<const void>(a[6]), i(7), i(8),
                  i(9), i(10), i(11), i(12), i(13), i(14), i(15), i(16), i(17), i(18), i(19),
                  i(20), i(21), i(22), i(23), i(24), i(25), i(26), i(27), i(28), i(29), i(30),
                  i(31), i(32), i(33), static_cast<int>(a[34]), static_cast<int>(a[35]),
                  uint3{bx, by, bz}, uint3{tx, ty, tz}, block_dim, grid_dim);
            }
}

template <typename T, bool INTERLEAVED, typename I>
int run_width(int width, const long long* a, const unsigned* grid, const unsigned* block) {
  switch (width) {
    case 1: run<T, 1, INTERLEAVED, I>(a, grid, block); return 0;
    case 2: run<T, 2, INTERLEAVED, I>(a, grid, block); return 0;
    case 4:
      if constexpr (sizeof(T) <= 4) {
        run<T, 4, INTERLEAVED, I>(a, grid, block);
        return 0;
      }
      return 2;
    case 8:
      if constexpr (sizeof(T) == 2) {
        run<T, 8, INTERLEAVED, I>(a, grid, block);
        return 0;
      }
      return 2;
    default: return 2;
  }
}

template <typename T>
int run_variant(int width, bool interleaved, bool wide, const long long* a, const unsigned* grid,
                const unsigned* block) {
  if (interleaved) {
    return wide ? run_width<T, true, long long>(width, a, grid, block)
                : run_width<T, true, int>(width, a, grid, block);
  }
  return wide ? run_width<T, false, long long>(width, a, grid, block)
              : run_width<T, false, int>(width, a, grid, block);
}

// SSE arithmetic keeps subnormals unless the thread's MXCSR has FTZ or DAZ set, which a
// library built with -ffast-math does for the whole process when it is loaded.
bool keeps_subnormals() {
  volatile float smallest_normal = FLT_MIN;
  volatile float subnormal = smallest_normal * 0.5f;  // 0 under FTZ
  return subnormal * 2.0f == FLT_MIN;                 // 0 under DAZ
}

}  // namespace

// dtype: 0 float16, 1 bfloat16, 2 float32, 3 float64.  Returns 0 on success, 1 for a wrong
// argument count, 2 for a width the dtype has no variant of, 3 for an unknown dtype, 4 when
// this thread flushes subnormals to zero.
extern "C" int anyrope_harness_run(int dtype, int width, int interleaved, int wide_index,
                                   const unsigned* grid, const unsigned* block,
                                   const long long* args, int n_args) {
  if (n_args != kParams) return 1;
  if (!keeps_subnormals()) return 4;
  switch (dtype) {
    case 0: return run_variant<__half>(width, interleaved, wide_index, args, grid, block);
    case 1: return run_variant<__nv_bfloat16>(width, interleaved, wide_index, args, grid, block);
    case 2: return run_variant<float>(width, interleaved, wide_index, args, grid, block);
    case 3: return run_variant<double>(width, interleaved, wide_index, args, grid, block);
    default: return 3;
  }
}
