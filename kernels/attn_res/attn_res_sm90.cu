#include "attn_res/attn_res.h"
#include "common/cuda_check.h"
#include "common/reduce.cuh"

namespace pdserve::cuda {

namespace {

__global__ void attn_res_kernel(const float* __restrict__ bank, int count, const float* __restrict__ partial, int64_t tokens,
                                int64_t dim, const float* __restrict__ score_vec, float eps, float* __restrict__ out) {
  __shared__ float prob[kMaxAttnResSources];
  const int64_t t = blockIdx.x;
  auto src = [&](int s) { return s < count ? bank + (s * tokens + t) * dim : partial + t * dim; };
  for (int s = 0; s <= count; ++s) {
    const float* v = src(s);
    float ss = 0.0f, dp = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      ss += v[i] * v[i];
      dp += v[i] * score_vec[i];
    }
    ss = block_sum(ss);
    dp = block_sum(dp);
    if (threadIdx.x == 0) prob[s] = dp * rsqrtf(ss / static_cast<float>(dim) + eps);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float mx = prob[0];
    for (int s = 1; s <= count; ++s) mx = fmaxf(mx, prob[s]);
    float sum = 0.0f;
    for (int s = 0; s <= count; ++s) sum += (prob[s] = expf(prob[s] - mx));
    for (int s = 0; s <= count; ++s) prob[s] /= sum;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s <= count; ++s) acc += prob[s] * src(s)[i];
    out[t * dim + i] = acc;
  }
}

}  // namespace

Status attn_res_mix(const float* bank, int count, const float* partial, int64_t tokens, int64_t dim, const float* score_vec,
                    float eps, float* out, cudaStream_t stream) {
  if (count + 1 > kMaxAttnResSources) return invalid_argument("attn_res_mix: too many sources");
  if (tokens == 0) return Status::ok();
  attn_res_kernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(bank, count, partial, tokens, dim, score_vec, eps, out);
  return last_launch_status("attn_res_mix");
}

}  // namespace pdserve::cuda
