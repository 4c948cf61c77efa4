// Test-only device helper of moe_decode_test: the E4M3 forms' hi / lo token conversion, alone.
#include "moe_decode_test_kernels.h"

#include <algorithm>

#include "common/cuda_check.h"
#include "moe/moe_decode_qgmma.cuh"

namespace pdserve::cuda::moe_decode_test {

namespace {

__global__ void hi_lo_kernel(const float2* in, int64_t pairs, uint32_t* hi, uint32_t* lo) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pairs; i += int64_t(gridDim.x) * blockDim.x)
    moe_decode_detail::e4m3_hi_lo2(in[i], hi + i, lo + i);
}

}  // namespace

Status e4m3_hi_lo_pairs(const float* in, int64_t pairs, uint32_t* hi, uint32_t* lo, cudaStream_t stream) {
  if (pairs <= 0) return Status::ok();
  const int64_t blocks = std::min<int64_t>((pairs + 255) / 256, 1024);
  hi_lo_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(reinterpret_cast<const float2*>(in), pairs, hi, lo);
  return cuda_status(cudaGetLastError(), "e4m3_hi_lo_pairs");
}

}  // namespace pdserve::cuda::moe_decode_test
