// Runs the anyrope CUDA kernel body on the CPU over a simulated grid.
//
// Built by tests/test_cuda_source.py with g++ -ffp-contract=off against
// src/anyrope/_cuda/rope_math.cuh, the header that rope.cu includes: the very same
// index mapping and rounding, called for every (blockIdx.x, threadIdx.x) in order.
//
// Usage: harness CASE_FILE RESULT_FILE
// CASE_FILE (little-endian int64 words unless said otherwise):
//   n_buffers, then per buffer: n_bytes, the bytes, zero padding to 8 bytes
//   dtype (0 float16, 1 bfloat16, 2 float32, 3 float64), vector (0/1), interleaved (0/1),
//   pos_type (0 int32, 1 int64), grid, block, n_args, args[n_args]
// Pointer arguments are (buffer index + 1) << 40 | byte offset, 0 for a null pointer,
// so the host-side alignment checks see the same residues as on a device.
// RESULT_FILE: every buffer's bytes after the run, back to back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rope_math.cuh"

namespace {

constexpr int kParams = 34;
constexpr int kPointerShift = 40;

struct Buffer {
  std::size_t n_bytes;
  unsigned char* data;
};

std::vector<Buffer> g_buffers;

void* resolve(long long encoded) {
  if (encoded == 0) return nullptr;
  const auto index = static_cast<std::size_t>(encoded >> kPointerShift) - 1;
  const auto offset = static_cast<std::size_t>(encoded & ((1LL << kPointerShift) - 1));
  if (index >= g_buffers.size()) {
    std::fprintf(stderr, "pointer argument names buffer %zu of %zu\n", index, g_buffers.size());
    std::exit(2);
  }
  return g_buffers[index].data + offset;
}

template <typename T, int V, bool INTERLEAVED, typename P>
void run(const long long* a, long long grid, long long block) {
  using C = typename anyrope::compute_of<T>::type;
  for (long long b = 0; b < grid; ++b) {
    for (long long t = 0; t < block; ++t) {
      anyrope::rope_entry<T, V, INTERLEAVED, P>(
          static_cast<const T*>(resolve(a[0])), static_cast<T*>(resolve(a[1])), a[2], a[3], a[4],
          a[5], a[6], a[7], a[8], a[9], a[10], a[11], static_cast<const T*>(resolve(a[12])),
          static_cast<T*>(resolve(a[13])), a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21],
          a[22], a[23], static_cast<const C*>(resolve(a[24])),
          static_cast<const C*>(resolve(a[25])), static_cast<const P*>(resolve(a[26])), a[27],
          a[28], a[29], a[30], a[31], a[32], static_cast<int>(a[33]), b, t, block, grid);
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
void run_positions(long long pos_type, bool vector, bool interleaved, const long long* a,
                   long long grid, long long block) {
  if (pos_type == 0) {
    run_pairs<T, int>(vector, interleaved, a, grid, block);
  } else {
    run_pairs<T, long long>(vector, interleaved, a, grid, block);
  }
}

long long read_word(std::FILE* f) {
  long long v = 0;
  if (std::fread(&v, sizeof v, 1, f) != 1) {
    std::fprintf(stderr, "case file ends early\n");
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CASE_FILE RESULT_FILE\n", argv[0]);
    return 2;
  }
  std::FILE* in = std::fopen(argv[1], "rb");
  if (in == nullptr) {
    std::perror(argv[1]);
    return 2;
  }
  const long long n_buffers = read_word(in);
  for (long long i = 0; i < n_buffers; ++i) {
    const auto n_bytes = static_cast<std::size_t>(read_word(in));
    const std::size_t padded = (n_bytes + 63) / 64 * 64 + 64;
    auto* data = static_cast<unsigned char*>(std::aligned_alloc(64, padded));
    if (std::fread(data, 1, n_bytes, in) != n_bytes) {
      std::fprintf(stderr, "buffer %lld ends early\n", i);
      return 2;
    }
    const std::size_t pad = (8 - n_bytes % 8) % 8;
    unsigned char skip[8];
    if (pad != 0 && std::fread(skip, 1, pad, in) != pad) return 2;
    g_buffers.push_back({n_bytes, data});
  }
  const long long dtype = read_word(in);
  const bool vector = read_word(in) != 0;
  const bool interleaved = read_word(in) != 0;
  const long long pos_type = read_word(in);
  const long long grid = read_word(in);
  const long long block = read_word(in);
  const long long n_args = read_word(in);
  if (n_args != kParams) {
    std::fprintf(stderr, "expected %d kernel arguments, got %lld\n", kParams, n_args);
    return 2;
  }
  long long args[kParams];
  for (long long& a : args) a = read_word(in);
  std::fclose(in);

  switch (dtype) {
    case 0: run_positions<__half>(pos_type, vector, interleaved, args, grid, block); break;
    case 1: run_positions<__nv_bfloat16>(pos_type, vector, interleaved, args, grid, block); break;
    case 2: run_positions<float>(pos_type, vector, interleaved, args, grid, block); break;
    case 3: run_positions<double>(pos_type, vector, interleaved, args, grid, block); break;
    default: std::fprintf(stderr, "unknown dtype code %lld\n", dtype); return 2;
  }

  std::FILE* out = std::fopen(argv[2], "wb");
  if (out == nullptr) {
    std::perror(argv[2]);
    return 2;
  }
  for (const Buffer& b : g_buffers) {
    if (std::fwrite(b.data, 1, b.n_bytes, out) != b.n_bytes) return 2;
    std::free(b.data);
  }
  std::fclose(out);
  return 0;
}
