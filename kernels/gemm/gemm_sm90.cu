#include "common/cuda_check.h"
#include "gemm/gemm.h"

namespace pdserve::cuda {

namespace {

constexpr int kTile = 16;

// One 16x16 output tile per block, one output per thread; k in tiles of 16 through shared
// memory (the +1 column avoids bank conflicts on the transposed read).
__global__ void matmul_nt_kernel(const float* __restrict__ x, int64_t m, const float* __restrict__ w, int64_t n, int64_t k,
                                 float* __restrict__ y) {
  __shared__ float xs[kTile][kTile + 1], ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = int64_t(blockIdx.y) * kTile + ty, col = int64_t(blockIdx.x) * kTile + tx;
  const int64_t wrow = int64_t(blockIdx.x) * kTile + ty;  // the W row this thread loads
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    xs[ty][tx] = row < m && k0 + tx < k ? x[row * k + k0 + tx] : 0.0f;
    ws[ty][tx] = wrow < n && k0 + tx < k ? w[wrow * k + k0 + tx] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc += xs[ty][j] * ws[tx][j];
    __syncthreads();
  }
  if (row < m && col < n) y[row * n + col] = acc;
}

}  // namespace

Status matmul_nt(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return Status::ok();
  if ((n + kTile - 1) / kTile > INT32_MAX || (m + kTile - 1) / kTile > 65535) return invalid_argument("matmul_nt: too large");
  const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  matmul_nt_kernel<<<grid, dim3(kTile, kTile), 0, stream>>>(x, m, w, n, k, y);
  return last_launch_status("matmul_nt");
}

}  // namespace pdserve::cuda
