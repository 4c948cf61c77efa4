#include "common/cuda_check.h"
#include "embedding/embedding.h"

namespace pdserve::cuda {

namespace {

__global__ void embedding_kernel(const uint16_t* __restrict__ table, int64_t vocab, int64_t dim, const int32_t* __restrict__ ids,
                                 float* __restrict__ out) {
  const int32_t id = ids[blockIdx.x];
  float* row = out + blockIdx.x * dim;
  const bool ok = id >= 0 && id < vocab;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    row[i] = ok ? __uint_as_float(static_cast<uint32_t>(table[id * dim + i]) << 16) : 0.0f;
}

}  // namespace

Status embedding_bf16(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n, float* out,
                      cudaStream_t stream) {
  if (n == 0) return Status::ok();
  embedding_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(table, vocab, dim, ids, out);
  return last_launch_status("embedding_bf16");
}

}  // namespace pdserve::cuda
