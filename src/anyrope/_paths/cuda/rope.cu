// The anyrope RoPE kernel: one templated element-wise kernel for every dtype.
//
// Template parameters:
//   T            element type: __half, __nv_bfloat16, float, double
//   V            pairs per work unit: V * sizeof(T) bytes (16, 8 or 4) per access of x in
//                the vector variants; 1 for the scalar variant (non-unit last stride,
//                misaligned pointers, an odd rotated half)
//   INTERLEAVED  pairs (x[2i], x[2i+1]) instead of half-split (x[i], x[i + r/2])
//   I            index type: int when every offset of the launch fits, else long long
// The parameters (ANYROPE_PARAMS in rope_math.cuh) are flat pointers and integers, so CuPy
// arrays and raw torch pointers are packed the same way.  q_in may equal q_out (in place),
// hence no __restrict__ on the tensors.
#include "rope_math.cuh"

// The table rows of a block's tokens (rope_thread); sized by the launch.
extern __shared__ __align__(16) unsigned char anyrope_shared[];

template <typename T, int V, bool INTERLEAVED, typename I>
__global__ void __launch_bounds__(256)
    anyrope_rope(ANYROPE_PARAMS(T, typename anyrope::compute_of<T>::type, I)) {
  anyrope::rope_entry<T, V, INTERLEAVED, I>(ANYROPE_ARGS, anyrope_shared, blockIdx, threadIdx,
                                            blockDim, gridDim);
}
