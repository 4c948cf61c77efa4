#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "norm/norm.h"

namespace pdserve::cuda {

namespace {

template <bool kGated>
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ gate, int64_t dim,
                                const float* __restrict__ weight, float eps, float* y) {
  const float* xr = x + blockIdx.x * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(dim) + eps);
  float* yr = y + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = xr[i] * inv * (weight ? weight[i] : 1.0f);
    if constexpr (kGated) v *= sigmoid(gate[blockIdx.x * dim + i]);
    yr[i] = v;
  }
}

int threads_for(int64_t dim) { return dim >= 1024 ? 1024 : dim >= 256 ? 256 : 128; }

}  // namespace

Status rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y, cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  rms_norm_kernel<false><<<static_cast<unsigned>(rows), threads_for(dim), 0, stream>>>(x, nullptr, dim, weight, eps, y);
  return last_launch_status("rms_norm");
}

Status gated_rms_norm(const float* x, const float* gate, int64_t rows, int64_t dim, const float* weight, float eps, float* y,
                      cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  rms_norm_kernel<true><<<static_cast<unsigned>(rows), threads_for(dim), 0, stream>>>(x, gate, dim, weight, eps, y);
  return last_launch_status("gated_rms_norm");
}

}  // namespace pdserve::cuda
