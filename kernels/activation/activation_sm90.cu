#include "activation/activation.h"
#include "common/cuda_check.h"
#include "common/reduce.cuh"

namespace pdserve::cuda {

namespace {

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

__global__ void situ_mul_kernel(const float* gate, const float* up, int64_t n, float beta, float linear_beta, float* out) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    const float a = beta * tanhf(g / beta) * sigmoid(g);
    const float u = linear_beta > 0.0f ? linear_beta * tanhf(up[i] / linear_beta) : up[i];
    out[i] = a * u;
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535); }

}  // namespace

Status silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  silu_mul_kernel<<<blocks_for(n), 256, 0, stream>>>(gate, up, n, out);
  return last_launch_status("silu_mul");
}

Status situ_mul(const float* gate, const float* up, int64_t n, float beta, float linear_beta, float* out, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  situ_mul_kernel<<<blocks_for(n), 256, 0, stream>>>(gate, up, n, beta, linear_beta, out);
  return last_launch_status("situ_mul");
}

}  // namespace pdserve::cuda
