// Runs the anyrope CUDA kernel body on the CPU over a simulated grid.
//
// Built by tests/test_cuda_source.py as a shared library with g++ -ffp-contract=off
// against src/anyrope/_paths/cuda/rope_math.cuh, the header that rope.cu includes, and called
// through ctypes in place of the CuPy launch: the very same index mapping and rounding,
// run for every (blockIdx, threadIdx) of the 3-D grid on host memory, with the arguments
// that anyrope._paths.cuda.dispatch packed for the device (pointers are host addresses here).
//
// The threads of a block share memory and meet at barriers, so each block runs its threads
// as fibers (POSIX ucontext), each on a stack of its own, in turns: every fiber runs until
// it reaches a barrier or ends, then the next; the last thread first, so that a thread that
// reads the shared rows before a barrier made them ready reads what the harness filled them
// with (0xff bytes: NaN), not what an earlier thread happened to leave there.  A turn in
// which the fibers stop at different barriers, or some end while others wait, fails the
// launch (a barrier that not every thread reaches hangs or corrupts a real block).
#include <ucontext.h>

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "rope_math.cuh"

// NumPy keeps subnormals and rounds every operation to nearest even; so must the host build.
#if defined(__FAST_MATH__)
#error "the harness must be built without -ffast-math: it flushes subnormals and reorders math"
#endif

namespace {

constexpr int kParams = 35;

template <typename T> T* ptr(long long address) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

constexpr std::size_t kStack = 64 * 1024;
// Bytes past the block's shared memory that must stay as the harness wrote them.
constexpr std::size_t kGuard = 4096;
constexpr unsigned char kCanary = 0xa5;

// The scheduler of one block's fibers, one per host thread (ctypes may call from several).
struct Block {
  ucontext_t scheduler;
  std::vector<ucontext_t> fibers;
  std::vector<int> waiting;  // the barrier each fiber waits at; 0 when it has ended
  std::vector<std::vector<char>> stacks;
  const std::function<void(unsigned)>* body = nullptr;
  unsigned current = 0;
  // The fault to test that the checks catch it: 1, the first fiber to run passes every
  // barrier without waiting; 2, every fiber passes the barrier that makes the rows ready.
  int skip = 0;
};
thread_local Block block_state;

void fiber_main() {
  Block& s = block_state;
  const unsigned t = s.current;
  (*s.body)(t);
  s.waiting[t] = 0;
}

// Runs body(t) for t < n as fibers; 0 when every barrier was met by every fiber, else 5.
int run_block(unsigned n, const std::function<void(unsigned)>& body) {
  Block& s = block_state;
  s.body = &body;
  s.fibers.resize(n);
  s.waiting.assign(n, -1);
  if (s.stacks.size() < n) s.stacks.resize(n, std::vector<char>(kStack));
  for (unsigned t = 0; t < n; ++t) {
    getcontext(&s.fibers[t]);
    s.fibers[t].uc_stack.ss_sp = s.stacks[t].data();
    s.fibers[t].uc_stack.ss_size = kStack;
    s.fibers[t].uc_link = &s.scheduler;
    makecontext(&s.fibers[t], fiber_main, 0);
  }
  for (;;) {
    for (unsigned t = n; t-- > 0;) {
      s.current = t;
      swapcontext(&s.scheduler, &s.fibers[t]);
    }
    // Every fiber has ended or waits: all at the same barrier, or all ended.
    for (unsigned t = 1; t < n; ++t) {
      if (s.waiting[t] != s.waiting[0]) return 5;
    }
    if (s.waiting[0] == 0) return 0;
  }
}

}  // namespace

void anyrope::host_barrier(int id) {
  Block& s = block_state;
  if (s.skip == 1 && s.current == s.waiting.size() - 1) return;
  if (s.skip == 2 && id == anyrope::kRowsStaged) return;
  const unsigned t = s.current;
  s.waiting[t] = id;
  swapcontext(&s.fibers[t], &s.scheduler);
}

namespace {

// Every block in order (x fastest), each with its threads as fibers and its own shared
// memory of `shared` bytes, NaN bytes at first, followed by a guard that must stay intact.
template <typename T, int V, bool INTERLEAVED, typename I>
int run(const long long* a, const unsigned* grid, const unsigned* block, unsigned shared) {
  using C = typename anyrope::compute_of<T>::type;
  const uint3 grid_dim{grid[0], grid[1], grid[2]};
  const uint3 block_dim{block[0], block[1], block[2]};
  const auto i = [a](int n) { return static_cast<I>(a[n]); };
  std::vector<double> memory((shared + kGuard) / sizeof(double) + 1);
  unsigned char* bytes = reinterpret_cast<unsigned char*>(memory.data());
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = 0; bx < grid[0]; ++bx) {
        std::memset(bytes, 0xff, shared);
        std::memset(bytes + shared, kCanary, kGuard);
        const std::function<void(unsigned)> body = [&](unsigned t) {
          const unsigned tx = t % block[0], ty = t / block[0] % block[1];
          const unsigned tz = t / block[0] / block[1];
          anyrope::rope_entry<T, V, INTERLEAVED, I>(
              ptr<const T>(a[0]), ptr<T>(a[1]), ptr<const T>(a[2]), ptr<T>(a[3]),
              ptr<const C>(a[4]), ptr<const C>(a[5]), ptr<const void>(a[6]), i(7), i(8), i(9),
              i(10), i(11), i(12), i(13), i(14), i(15), i(16), i(17), i(18), i(19), i(20),
              i(21), i(22), i(23), i(24), i(25), i(26), i(27), i(28), i(29), i(30), i(31),
              i(32), static_cast<int>(a[33]), static_cast<int>(a[34]), bytes,
              uint3{bx, by, bz}, uint3{tx, ty, tz}, block_dim, grid_dim);
        };
        if (const int code = run_block(block[0] * block[1] * block[2], body)) return code;
        for (std::size_t n = 0; n < kGuard; ++n) {
          if (bytes[shared + n] != kCanary) return 6;
        }
      }
  return 0;
}

template <typename T, bool INTERLEAVED, typename I>
int run_width(int width, const long long* a, const unsigned* grid, const unsigned* block,
              unsigned shared) {
  switch (width) {
    case 1: return run<T, 1, INTERLEAVED, I>(a, grid, block, shared);
    case 2: return run<T, 2, INTERLEAVED, I>(a, grid, block, shared);
    case 4:
      if constexpr (sizeof(T) <= 4) return run<T, 4, INTERLEAVED, I>(a, grid, block, shared);
      return 2;
    case 8:
      if constexpr (sizeof(T) == 2) return run<T, 8, INTERLEAVED, I>(a, grid, block, shared);
      return 2;
    default: return 2;
  }
}

template <typename T>
int run_variant(int width, bool interleaved, bool wide, const long long* a, const unsigned* grid,
                const unsigned* block, unsigned shared) {
  if (interleaved) {
    return wide ? run_width<T, true, long long>(width, a, grid, block, shared)
                : run_width<T, true, int>(width, a, grid, block, shared);
  }
  return wide ? run_width<T, false, long long>(width, a, grid, block, shared)
              : run_width<T, false, int>(width, a, grid, block, shared);
}

// SSE arithmetic keeps subnormals unless the thread's MXCSR has FTZ or DAZ set, which a
// library built with -ffast-math does for the whole process when it is loaded.
bool keeps_subnormals() {
  volatile float smallest_normal = FLT_MIN;
  volatile float subnormal = smallest_normal * 0.5f;  // 0 under FTZ
  return subnormal * 2.0f == FLT_MIN;                 // 0 under DAZ
}

}  // namespace

// dtype: 0 float16, 1 bfloat16, 2 float32, 3 float64; `shared`: the launch's bytes of
// dynamic shared memory; `skip`: 0, or a fault for the harness to catch (Block::skip).
// Returns 0 on success, 1 for a wrong argument count, 2 for a width the dtype has no variant
// of, 3 for an unknown dtype, 4 when this thread flushes subnormals to zero, 5 when the
// threads of a block did not all meet at a barrier, 6 when a block wrote past its shared
// memory.
extern "C" int anyrope_harness_run(int dtype, int width, int interleaved, int wide_index,
                                   const unsigned* grid, const unsigned* block, unsigned shared,
                                   const long long* args, int n_args, int skip) {
  if (n_args != kParams) return 1;
  if (!keeps_subnormals()) return 4;
  block_state.skip = skip;
  switch (dtype) {
    case 0: return run_variant<__half>(width, interleaved, wide_index, args, grid, block, shared);
    case 1:
      return run_variant<__nv_bfloat16>(width, interleaved, wide_index, args, grid, block,
                                        shared);
    case 2: return run_variant<float>(width, interleaved, wide_index, args, grid, block, shared);
    case 3: return run_variant<double>(width, interleaved, wide_index, args, grid, block, shared);
    default: return 3;
  }
}
