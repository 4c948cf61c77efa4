// moe_permute and moe_combine (contract: moe.h). Deterministic: no atomics decide any
// order; each local expert's block compacts its pairs in ascending pair index.
#include <cuda_bf16.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "common/pdl_bulk.cuh"
#include "moe/moe.h"
#include "moe/moe_prefill.h"
#include "moe/moe_prefill_schedule.h"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxLocalExperts = 1024;
constexpr int64_t kMaxK = 64;

// Up to this many (token, k) pairs moe_permute gathers the rows in the plan's own launch (each
// expert's block copies its rows once it has placed them): a decode step's few rows then cost one
// launch on the critical path instead of two (the routed step from a graph 2.2-2.4 us faster at
// batch 1-2, 1.5-2.3 at 4-32 on one EP32 rank; docs/perf.md "The decode step's permute in one
// launch"). Past it one block an expert copies too many rows alone, one after another (at 2048-4096
// pairs the step was 1-2% slower), so the rows go to gather_kernel's block a row.
constexpr int64_t kFusedGatherMaxPairs = 1024;

// Block e's part of the plan: pass 1 counts the pairs of local experts below e (= offsets[e])
// and of e; pass 2 is an ordered compaction of e's pairs. Block 0 also marks the pairs of other
// ranks' experts (pair_row = -1). Returns e's first sorted row; *mine_out = its row count.
__device__ __forceinline__ int32_t plan_expert(const int32_t* __restrict__ ids, int64_t n, int64_t expert_begin, int64_t experts,
                                               int32_t* offsets, int32_t* sorted_pairs, int32_t* pair_row, int32_t* mine_out) {
  __shared__ int warp_below[kWarps], warp_mine[kWarps];
  const int64_t e = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int below = 0, mine = 0;
  for (int64_t p = threadIdx.x; p < n; p += kThreads) {
    const int64_t le = int64_t(ids[p]) - expert_begin;
    below += le >= 0 && le < e;
    mine += le == e;
  }
  for (int o = 16; o > 0; o >>= 1) {
    below += __shfl_xor_sync(0xffffffffu, below, o);
    mine += __shfl_xor_sync(0xffffffffu, mine, o);
  }
  if (lane == 0) warp_below[warp] = below, warp_mine[warp] = mine;
  __syncthreads();
  int32_t base = 0, total_mine = 0;
  for (int w = 0; w < kWarps; ++w) base += warp_below[w], total_mine += warp_mine[w];
  const int32_t first = base;
  *mine_out = total_mine;
  if (threadIdx.x == 0) {
    offsets[e] = base;
    if (e == experts - 1) offsets[experts] = base + total_mine;
  }
  __syncthreads();  // warp_mine is reused below
  int* warp_counts = warp_mine;
  const int32_t eg = static_cast<int32_t>(expert_begin + e);
  for (int64_t chunk = 0; chunk < n; chunk += kThreads) {
    const int64_t p = chunk + threadIdx.x;
    const int32_t id = p < n ? ids[p] : eg - 1;
    const bool is_mine = p < n && id == eg;
    if (e == 0 && p < n && (int64_t(id) < expert_begin || int64_t(id) >= expert_begin + experts)) pair_row[p] = -1;
    const unsigned ballot = __ballot_sync(0xffffffffu, is_mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (is_mine) {
      const int32_t row = base + before + __popc(ballot & ((1u << lane) - 1u));
      sorted_pairs[row] = static_cast<int32_t>(p);
      pair_row[p] = row;
    }
    base += total;
    __syncthreads();
  }
  return first;
}

// One block per local expert: its part of the plan.
__global__ void __launch_bounds__(kThreads) plan_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t expert_begin,
                                                        int64_t experts, int32_t* offsets, int32_t* sorted_pairs,
                                                        int32_t* pair_row) {
  int32_t mine;
  plan_expert(ids, n, expert_begin, experts, offsets, sorted_pairs, pair_row, &mine);
}

// plan_kernel, then the block copies its expert's rows: x_sorted[row] = x[sorted_pairs[row] / k]
// (the sorted_pairs it wrote itself: the barrier at plan_expert's end makes them visible to the
// block), 4 features a thread.
__global__ void __launch_bounds__(kThreads) plan_gather_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t expert_begin,
                                                               int64_t experts, int32_t* offsets, int32_t* sorted_pairs,
                                                               int32_t* pair_row, const float* __restrict__ x, int64_t dim, int64_t k,
                                                               float* __restrict__ x_sorted) {
  // A decode kernel launched after it as a programmatic dependent (the E4M3 wide form's gate/up) may
  // take its SMs now; it waits for this grid's end before reading anything. (Launched normally, this
  // kernel starts only once everything before it is done, so the chain stays transitive.)
  pdl_bulk::pdl_trigger();
  int32_t mine;
  const int32_t first = plan_expert(ids, n, expert_begin, experts, offsets, sorted_pairs, pair_row, &mine);
  const int64_t d4n = dim / 4;
  for (int32_t r = 0; r < mine; ++r) {  // at most a few rows an expert: every thread on each row in turn
    const int64_t row = first + r, t = sorted_pairs[row] / k;
    const float4* src = reinterpret_cast<const float4*>(x + t * dim);
    float4* dst = reinterpret_cast<float4*>(x_sorted + row * dim);
    for (int64_t d4 = threadIdx.x; d4 < d4n; d4 += kThreads) dst[d4] = src[d4];
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

// gather_kernel writing bf16 (the prefill GEMM's operand): 4 features per thread.
__global__ void gather_bf16_kernel(const float* __restrict__ x, int64_t dim, int64_t k, const int32_t* offsets, int64_t experts,
                                   const int32_t* sorted_pairs, uint16_t* x_sorted, bool wgmma_order) {
  const int64_t row = blockIdx.x;
  if (row >= offsets[experts]) return;
  const int64_t t = sorted_pairs[row] / k;
  const float4* src = reinterpret_cast<const float4*>(x + t * dim);
  uint2* dst = reinterpret_cast<uint2*>(x_sorted + row * dim);
  uint32_t* dst32 = reinterpret_cast<uint32_t*>(x_sorted + row * dim);
  for (int64_t i = threadIdx.x; i < dim / 4; i += blockDim.x) {
    const float4 v = src[i];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    if (!wgmma_order) {
      dst[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    } else {  // inputs 4i .. 4i + 3 as two pairs to their wgmma_k_position slots
      const int64_t group = (4 * i) & ~int64_t(31);
      const int j = static_cast<int>((4 * i) & 31);
      dst32[(group + moe_prefill_detail::wgmma_k_position(j)) / 2] = *reinterpret_cast<const uint32_t*>(&lo);
      dst32[(group + moe_prefill_detail::wgmma_k_position(j + 2)) / 2] = *reinterpret_cast<const uint32_t*>(&hi);
    }
  }
}

// Block (t, slice): 4 consecutive features per thread; the token's k rows and weights are
// read once into shared memory. Per feature the k terms are added in order, each a
// rounded multiply then a rounded add.
__global__ void __launch_bounds__(kThreads) combine_kernel(const float* __restrict__ out_sorted, const int32_t* __restrict__ pair_row,
                                                           const float* __restrict__ weights, int64_t k, int64_t dim,
                                                           float* __restrict__ y) {
  __shared__ int32_t rows[kMaxK];
  __shared__ float w[kMaxK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) {
    rows[threadIdx.x] = pair_row[t * k + threadIdx.x];
    w[threadIdx.x] = weights[t * k + threadIdx.x];
  }
  __syncthreads();
  const int64_t d4n = dim / 4;
  const float4* out4 = reinterpret_cast<const float4*>(out_sorted);
  for (int64_t d4 = int64_t(blockIdx.y) * kThreads + threadIdx.x; d4 < d4n; d4 += int64_t(gridDim.y) * kThreads) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = rows[j];
      const float4 v = row >= 0 ? out4[int64_t(row) * d4n + d4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float wj = w[j];
      acc.x = __fadd_rn(acc.x, __fmul_rn(wj, v.x));
      acc.y = __fadd_rn(acc.y, __fmul_rn(wj, v.y));
      acc.z = __fadd_rn(acc.z, __fmul_rn(wj, v.z));
      acc.w = __fadd_rn(acc.w, __fmul_rn(wj, v.w));
    }
    reinterpret_cast<float4*>(y)[t * d4n + d4] = acc;
  }
}

}  // namespace

Status moe_permute(const int32_t* ids, int64_t tokens, int64_t k, int64_t expert_begin, int64_t local_experts, const float* x,
                   int64_t dim, const MoePlan& plan, float* x_sorted, cudaStream_t stream) {
  if (local_experts <= 0 || local_experts > kMaxLocalExperts) return invalid_argument("moe_permute: local_experts must be 1..1024");
  if (k <= 0 || dim % 4) return invalid_argument("moe_permute: k must be positive and dim a multiple of 4");
  const int64_t n = tokens * k;
  if (n > INT32_MAX) return invalid_argument("moe_permute: too many pairs");
  if (n <= kFusedGatherMaxPairs) {
    plan_gather_kernel<<<static_cast<unsigned>(local_experts), kThreads, 0, stream>>>(ids, n, expert_begin, local_experts, plan.offsets,
                                                                                      plan.sorted_pairs, plan.pair_row, x, dim, k, x_sorted);
    return last_launch_status("moe_permute");
  }
  plan_kernel<<<static_cast<unsigned>(local_experts), kThreads, 0, stream>>>(ids, n, expert_begin, local_experts, plan.offsets,
                                                                             plan.sorted_pairs, plan.pair_row);
  gather_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(x, dim, k, plan.offsets, local_experts, plan.sorted_pairs, x_sorted);
  return last_launch_status("moe_permute");
}

Status moe_permute_bf16(const int32_t* ids, int64_t tokens, int64_t k, int64_t expert_begin, int64_t local_experts, const float* x,
                        int64_t dim, const MoePlan& plan, uint16_t* x_sorted, cudaStream_t stream, MoePrefillKernel kernel) {
  if (local_experts <= 0 || local_experts > kMaxLocalExperts) return invalid_argument("moe_permute_bf16: local_experts must be 1..1024");
  if (k <= 0 || dim % 4) return invalid_argument("moe_permute_bf16: k must be positive and dim a multiple of 4");
  const bool wgmma_order = moe_prefill_choice(kernel) != MoePrefillKernel::kMmaSync;
  if (wgmma_order && dim % 32) return invalid_argument("moe_permute_bf16: the wgmma kernels need dim a multiple of 32");
  const int64_t n = tokens * k;
  if (n > INT32_MAX) return invalid_argument("moe_permute_bf16: too many pairs");
  plan_kernel<<<static_cast<unsigned>(local_experts), kThreads, 0, stream>>>(ids, n, expert_begin, local_experts, plan.offsets,
                                                                             plan.sorted_pairs, plan.pair_row);
  if (n > 0)
    gather_bf16_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(x, dim, k, plan.offsets, local_experts, plan.sorted_pairs, x_sorted,
                                                                     wgmma_order);
  return last_launch_status("moe_permute_bf16");
}

Status moe_combine(const float* out_sorted, const int32_t* pair_row, const float* weights, int64_t tokens, int64_t k, int64_t dim,
                   float* y, cudaStream_t stream) {
  if (k <= 0 || k > kMaxK || dim % 4) return invalid_argument("moe_combine: k must be 1..64 and dim a multiple of 4");
  if (tokens == 0) return Status::ok();
  if (tokens > INT32_MAX) return invalid_argument("moe_combine: too many tokens");
  const int64_t slices = std::min<int64_t>((dim / 4 + kThreads - 1) / kThreads, 65535);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(std::max<int64_t>(slices, 1)));
  combine_kernel<<<grid, kThreads, 0, stream>>>(out_sorted, pair_row, weights, k, dim, y);
  return last_launch_status("moe_combine");
}

}  // namespace pdserve::cuda
