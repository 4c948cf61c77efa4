#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "glue/glue.h"

namespace pdserve::cuda {

namespace {

__global__ void gather_kernel(const float* __restrict__ src, int64_t width, const int32_t* __restrict__ idx, float* __restrict__ dst) {
  const float* s = src + int64_t(idx[blockIdx.x]) * width;
  float* d = dst + int64_t(blockIdx.x) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

enum class Op { kAdd, kSigmoid, kMulSigmoid };

template <Op kOp>
__global__ void elementwise_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (kOp == Op::kAdd) x[i] += y[i];
    if constexpr (kOp == Op::kSigmoid) x[i] = sigmoid(x[i]);
    if constexpr (kOp == Op::kMulSigmoid) x[i] *= sigmoid(y[i]);
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535); }

template <Op kOp>
Status launch(float* x, const float* y, int64_t n, cudaStream_t stream, const char* what) {
  if (n == 0) return Status::ok();
  elementwise_kernel<kOp><<<blocks_for(n), 256, 0, stream>>>(x, y, n);
  return last_launch_status(what);
}

}  // namespace

Status gather_rows(const float* src, int64_t width, const int32_t* idx, int64_t n, float* dst, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (n > INT32_MAX) return invalid_argument("gather_rows: too many rows");
  gather_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(src, width, idx, dst);
  return last_launch_status("gather_rows");
}

Status add_inplace(float* x, const float* y, int64_t n, cudaStream_t stream) { return launch<Op::kAdd>(x, y, n, stream, "add_inplace"); }
Status sigmoid_inplace(float* x, int64_t n, cudaStream_t stream) {
  return launch<Op::kSigmoid>(x, nullptr, n, stream, "sigmoid_inplace");
}
Status mul_sigmoid(float* x, const float* g, int64_t n, cudaStream_t stream) {
  return launch<Op::kMulSigmoid>(x, g, n, stream, "mul_sigmoid");
}

}  // namespace pdserve::cuda
