// moe_permute and moe_combine (contract: moe.h). Deterministic: no atomics decide any
// order; each local expert's block compacts its pairs in ascending pair index.
#include "common/cuda_check.h"
#include "moe/moe.h"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxLocalExperts = 1024;

// One block per local expert: how many pairs chose it.
__global__ void count_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t expert_begin, int32_t* counts) {
  __shared__ int warp_counts[kWarps];
  const int32_t eg = static_cast<int32_t>(expert_begin + blockIdx.x);
  int c = 0;
  for (int64_t p = threadIdx.x; p < n; p += kThreads) c += ids[p] == eg;
  for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0) warp_counts[threadIdx.x >> 5] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_counts[w];
    counts[blockIdx.x] = total;
  }
}

// counts live in offsets[1..E]; turn them into the exclusive prefix in place. One thread:
// E <= 1024 additions.
__global__ void scan_kernel(int32_t* offsets, int64_t experts) {
  int32_t run = 0;
  offsets[0] = 0;
  for (int64_t e = 1; e <= experts; ++e) {
    run += offsets[e];
    offsets[e] = run;
  }
}

// Pairs whose expert is not on this rank get no row.
__global__ void mark_remote_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t expert_begin, int64_t experts,
                                   int32_t* pair_row) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = int64_t(ids[p]) - expert_begin;
    if (e < 0 || e >= experts) pair_row[p] = -1;
  }
}

// One block per local expert: an ordered compaction of the pairs that chose it.
__global__ void place_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t expert_begin, const int32_t* offsets,
                             int32_t* sorted_pairs, int32_t* pair_row) {
  __shared__ int warp_counts[kWarps];
  const int32_t eg = static_cast<int32_t>(expert_begin + blockIdx.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int32_t base = offsets[blockIdx.x];
  for (int64_t chunk = 0; chunk < n; chunk += kThreads) {
    const int64_t p = chunk + threadIdx.x;
    const bool mine = p < n && ids[p] == eg;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (mine) {
      const int32_t row = base + before + __popc(ballot & ((1u << lane) - 1u));
      sorted_pairs[row] = static_cast<int32_t>(p);
      pair_row[p] = row;
    }
    base += total;
    __syncthreads();
  }
}

// One block per sorted row (rows past the total exit): x_sorted[row] = x[pair / k].
__global__ void gather_kernel(const float* __restrict__ x, int64_t dim, int64_t k, const int32_t* offsets, int64_t experts,
                              const int32_t* sorted_pairs, float* x_sorted) {
  const int64_t row = blockIdx.x;
  if (row >= offsets[experts]) return;
  const int64_t t = sorted_pairs[row] / k;
  const float4* src = reinterpret_cast<const float4*>(x + t * dim);
  float4* dst = reinterpret_cast<float4*>(x_sorted + row * dim);
  for (int64_t i = threadIdx.x; i < dim / 4; i += blockDim.x) dst[i] = src[i];
}

// One block per token; the k terms in order, each a rounded multiply then a rounded add.
__global__ void combine_kernel(const float* __restrict__ out_sorted, const int32_t* __restrict__ pair_row,
                               const float* __restrict__ weights, int64_t k, int64_t dim, float* y) {
  const int64_t t = blockIdx.x;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = pair_row[t * k + j];
      const float v = row >= 0 ? out_sorted[int64_t(row) * dim + d] : 0.0f;
      acc = __fadd_rn(acc, __fmul_rn(weights[t * k + j], v));
    }
    y[t * dim + d] = acc;
  }
}

}  // namespace

Status moe_permute(const int32_t* ids, int64_t tokens, int64_t k, int64_t expert_begin, int64_t local_experts, const float* x,
                   int64_t dim, const MoePlan& plan, float* x_sorted, cudaStream_t stream) {
  if (local_experts <= 0 || local_experts > kMaxLocalExperts) return invalid_argument("moe_permute: local_experts must be 1..1024");
  if (k <= 0 || dim % 4) return invalid_argument("moe_permute: k must be positive and dim a multiple of 4");
  const int64_t n = tokens * k;
  if (n > INT32_MAX) return invalid_argument("moe_permute: too many pairs");
  const unsigned e = static_cast<unsigned>(local_experts);
  // Counts land in offsets[1..E]; the scan turns them into offsets in place.
  count_kernel<<<e, kThreads, 0, stream>>>(ids, n, expert_begin, plan.offsets + 1);
  scan_kernel<<<1, 1, 0, stream>>>(plan.offsets, local_experts);
  if (n > 0) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
    mark_remote_kernel<<<blocks, kThreads, 0, stream>>>(ids, n, expert_begin, local_experts, plan.pair_row);
    place_kernel<<<e, kThreads, 0, stream>>>(ids, n, expert_begin, plan.offsets, plan.sorted_pairs, plan.pair_row);
    gather_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(x, dim, k, plan.offsets, local_experts, plan.sorted_pairs, x_sorted);
  }
  return last_launch_status("moe_permute");
}

Status moe_combine(const float* out_sorted, const int32_t* pair_row, const float* weights, int64_t tokens, int64_t k, int64_t dim,
                   float* y, cudaStream_t stream) {
  if (tokens == 0) return Status::ok();
  if (tokens > INT32_MAX) return invalid_argument("moe_combine: too many tokens");
  combine_kernel<<<static_cast<unsigned>(tokens), 256, 0, stream>>>(out_sorted, pair_row, weights, k, dim, y);
  return last_launch_status("moe_combine");
}

}  // namespace pdserve::cuda
