#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "routing/routing.h"

namespace pdserve::cuda {

namespace {

constexpr int kMaxExperts = 1024;

// k rounds of a warp-wide arg-max over the biased scores kept in shared memory.
__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int64_t experts, int64_t k,
                             bool renormalize, float scaling, int32_t* ids, float* weights) {
  __shared__ float choice[kMaxExperts];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x;
  for (int64_t e = lane; e < experts; e += 32) choice[e] = sigmoid(logits[t * experts + e]) + (bias ? bias[e] : 0.0f);
  __syncwarp();
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    float best = -INFINITY;
    int best_id = 0x7fffffff;
    for (int64_t e = lane; e < experts; e += 32)
      if (choice[e] > best || (choice[e] == best && e < best_id)) { best = choice[e]; best_id = static_cast<int>(e); }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_id, o);
      if (ob > best || (ob == best && oi < best_id)) { best = ob; best_id = oi; }
    }
    const float w = sigmoid(logits[t * experts + best_id]);
    if (lane == 0) {
      ids[t * k + j] = best_id;
      weights[t * k + j] = w;
      choice[best_id] = -INFINITY;
    }
    sum += w;
    __syncwarp();
  }
  if (lane == 0)
    for (int64_t j = 0; j < k; ++j) {
      float w = weights[t * k + j];
      if (renormalize && k > 1) w /= (sum + 1e-20f);
      weights[t * k + j] = w * scaling;
    }
}

}  // namespace

Status route_sigmoid_topk(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t k, bool renormalize,
                          float scaling, int32_t* ids, float* weights, cudaStream_t stream) {
  if (experts > kMaxExperts || k > 32 || k > experts) return invalid_argument("route_sigmoid_topk: unsupported experts/k");
  if (tokens == 0) return Status::ok();
  route_kernel<<<static_cast<unsigned>(tokens), 32, 0, stream>>>(logits, bias, experts, k, renormalize, scaling, ids, weights);
  return last_launch_status("route_sigmoid_topk");
}

}  // namespace pdserve::cuda
