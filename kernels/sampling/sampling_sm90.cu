#include "common/cuda_check.h"
#include "sampling/sampling.h"

namespace pdserve::cuda {

namespace {

__global__ void argmax_kernel(const float* __restrict__ logits, int64_t vocab, int32_t* ids) {
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  const float* row = logits + blockIdx.x * vocab;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    if (row[i] > bv) { bv = row[i]; bi = static_cast<int>(i); }  // strided: first hit is the lowest id
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { best_v[warp] = bv; best_i[warp] = bi; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
      if (best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi)) { bv = best_v[w]; bi = best_i[w]; }
    ids[blockIdx.x] = bi;
  }
}

}  // namespace

Status argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  argmax_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(logits, vocab, ids);
  return last_launch_status("argmax_rows");
}

}  // namespace pdserve::cuda
