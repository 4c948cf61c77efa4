#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "mla/mla.h"

namespace pdserve::cuda {

namespace {

constexpr int kMaxLatentPerThread = 4;  // latent_dim <= 4 * blockDim (1024 with 256 threads)

// Element i of the cache: fp32, or bf16 read exactly (BF: MlaDecodeArgs::cache_bf16).
template <bool BF>
__device__ __forceinline__ float cache_at(const MlaDecodeArgs& a, int64_t i) {
  if constexpr (BF) return __uint_as_float(static_cast<uint32_t>(a.cache_bf16[i]) << 16);
  else return a.cache[i];
}

// One block per (row, head); online softmax over the context, each thread owning a few
// latent dims of the output accumulator.
template <bool BF>
__global__ void mla_kernel(const __grid_constant__ MlaDecodeArgs a) {
  const int64_t b = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
  const int64_t entry = a.latent_dim + a.rope_dim;
  const float* ql = a.q_lat + (b * a.heads + h) * a.latent_dim;
  const float* qr = a.q_rot + (b * a.heads + h) * a.rope_dim;
  float acc[kMaxLatentPerThread] = {0, 0, 0, 0};
  float mx = -INFINITY, sum = 0.0f;
  const int64_t n = a.ctx_len[b];
  for (int64_t j = 0; j < n; ++j) {
    const int32_t page = a.page_table[b * a.max_pages + j / a.page_size];
    const int64_t e = (static_cast<int64_t>(page) * a.page_size + j % a.page_size) * entry;
    float part = 0.0f;
    for (int64_t i = threadIdx.x; i < a.latent_dim; i += blockDim.x) part += ql[i] * cache_at<BF>(a, e + i);
    for (int64_t i = threadIdx.x; i < a.rope_dim; i += blockDim.x) part += qr[i] * cache_at<BF>(a, e + a.latent_dim + i);
    const float s = block_sum(part) * a.scale;
    const float nmx = fmaxf(mx, s);
    const float corr = expf(mx - nmx), p = expf(s - nmx);
    sum = sum * corr + p;
    int slot = 0;
    for (int64_t i = threadIdx.x; i < a.latent_dim; i += blockDim.x, ++slot) acc[slot] = acc[slot] * corr + p * cache_at<BF>(a, e + i);
    mx = nmx;
  }
  float* out = a.o_lat + (b * a.heads + h) * a.latent_dim;
  int slot = 0;
  for (int64_t i = threadIdx.x; i < a.latent_dim; i += blockDim.x, ++slot) out[i] = n > 0 ? acc[slot] / sum : 0.0f;
}

}  // namespace

Status mla_attend_latent(const MlaDecodeArgs& a, cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (a.latent_dim > kThreads * kMaxLatentPerThread) return invalid_argument("mla_attend_latent: latent_dim too large");
  if (a.rows * a.heads == 0) return Status::ok();
  if (a.cache_bf16) mla_kernel<true><<<static_cast<unsigned>(a.rows * a.heads), kThreads, 0, stream>>>(a);
  else mla_kernel<false><<<static_cast<unsigned>(a.rows * a.heads), kThreads, 0, stream>>>(a);
  return last_launch_status("mla_attend_latent");
}

}  // namespace pdserve::cuda
