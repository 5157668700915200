// Runs the anyrope CUDA kernel body on the CPU over a simulated grid.
//
// Built by tests/test_cuda_source.py as a shared library with g++ -ffp-contract=off
// against src/anyrope/_paths/cuda/rope_math.cuh, the header that rope.cu includes, and called
// through ctypes in place of the CuPy launch: the very same index mapping and rounding,
// run for every (blockIdx.x, threadIdx.x) in order on host memory, with the arguments
// that anyrope._paths.cuda.launch packed for the device (pointers are host addresses here).
#include <cfloat>
#include <cstdint>

#include "rope_math.cuh"

// NumPy keeps subnormals and rounds every operation to nearest even; so must the host build.
#if defined(__FAST_MATH__)
#error "the harness must be built without -ffast-math: it flushes subnormals and reorders math"
#endif

namespace {

constexpr int kParams = 34;

template <typename T> T* ptr(long long address) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

template <typename T, int V, bool INTERLEAVED, typename P>
void run(const long long* a, long long grid, long long block) {
  using C = typename anyrope::compute_of<T>::type;
  for (long long b = 0; b < grid; ++b) {
    for (long long t = 0; t < block; ++t) {
      anyrope::rope_entry<T, V, INTERLEAVED, P>(
          ptr<const T>(a[0]), ptr<T>(a[1]), a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
          a[11], ptr<const T>(a[12]), ptr<T>(a[13]), a[14], a[15], a[16], a[17], a[18], a[19],
          a[20], a[21], a[22], a[23], ptr<const C>(a[24]), ptr<const C>(a[25]),
          ptr<const P>(a[26]), a[27], a[28], a[29], a[30], a[31], a[32], static_cast<int>(a[33]),
          b, t, block, grid);
    }
  }
}

template <typename T, bool INTERLEAVED, typename P>
void run_width(bool vector, const long long* a, long long grid, long long block) {
  if (vector) {
    run<T, 16 / sizeof(T), INTERLEAVED, P>(a, grid, block);
  } else {
    run<T, 1, INTERLEAVED, P>(a, grid, block);
  }
}

template <typename T, typename P>
void run_pairs(bool vector, bool interleaved, const long long* a, long long grid, long long block) {
  if (interleaved) {
    run_width<T, true, P>(vector, a, grid, block);
  } else {
    run_width<T, false, P>(vector, a, grid, block);
  }
}

template <typename T>
int run_positions(int position_itemsize, bool vector, bool interleaved, const long long* a,
                  long long grid, long long block) {
  switch (position_itemsize) {
    case 4: run_pairs<T, int>(vector, interleaved, a, grid, block); return 0;
    case 8: run_pairs<T, long long>(vector, interleaved, a, grid, block); return 0;
    default: return 2;
  }
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
// argument count, 2 for an unknown position type, 3 for an unknown dtype, 4 when this
// thread flushes subnormals to zero.
extern "C" int anyrope_harness_run(int dtype, int vector, int interleaved, int position_itemsize,
                                   long long grid, long long block, const long long* args,
                                   int n_args) {
  if (n_args != kParams) return 1;
  if (!keeps_subnormals()) return 4;
  switch (dtype) {
    case 0: return run_positions<__half>(position_itemsize, vector, interleaved, args, grid, block);
    case 1:
      return run_positions<__nv_bfloat16>(position_itemsize, vector, interleaved, args, grid,
                                          block);
    case 2: return run_positions<float>(position_itemsize, vector, interleaved, args, grid, block);
    case 3: return run_positions<double>(position_itemsize, vector, interleaved, args, grid, block);
    default: return 3;
  }
}
