// moe_expert_mlp_dense (contract: moe.h): grouped fp32 GEMV over each local expert's rows,
// correct-first. One warp per (expert, output row): lanes stride the inputs, a warp sum
// per token row; the gated pass applies the activation as the CPU's activate() does.
#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "moe/moe.h"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerBlock = kThreads / 32;

__device__ float activate(MoeActivation kind, float beta, float linear_beta, float g, float u) {
  if (kind == MoeActivation::kSiLU) return g * sigmoid(g) * u;
  const float a = beta * tanhf(g / beta) * sigmoid(g);
  return a * (linear_beta > 0.0f ? linear_beta * tanhf(u / linear_beta) : u);
}

// y[row, r] = act(x[row] . A[e, r], x[row] . B[e, r]) when gated, else x[row] . A[e, r].
// A, B: [experts, out_rows, cols]; x: [*, cols]; y: [*, out_rows].
template <bool kGated>
__global__ void __launch_bounds__(kThreads) dense_gemv(const float* __restrict__ A, const float* __restrict__ B,
                                                       const int32_t* __restrict__ offsets, int64_t out_rows, int64_t cols,
                                                       const float* __restrict__ x, float* __restrict__ y, MoeActivation kind,
                                                       float beta, float linear_beta) {
  const int64_t e = blockIdx.y;
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= out_rows) return;
  const float* a = A + (e * out_rows + r) * cols;
  const float* b = kGated ? B + (e * out_rows + r) * cols : nullptr;
  for (int64_t row = offsets[e]; row < offsets[e + 1]; ++row) {
    const float* xr = x + row * cols;
    float sa = 0.0f, sb = 0.0f;
    for (int64_t i = lane; i < cols; i += 32) {
      sa += xr[i] * a[i];
      if constexpr (kGated) sb += xr[i] * b[i];
    }
    sa = warp_sum(sa);
    if constexpr (kGated) sb = warp_sum(sb);
    if (lane == 0) y[row * out_rows + r] = kGated ? activate(kind, beta, linear_beta, sa, sb) : sa;
  }
}

}  // namespace

Status moe_expert_mlp_dense(const MoeDenseWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                            const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream) {
  if (local_experts <= 0 || local_experts > 65535) return invalid_argument("moe_expert_mlp_dense: local_experts must be 1..65535");
  if (capacity == 0) return Status::ok();
  const dim3 grid_up(static_cast<unsigned>((w.inter + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(local_experts));
  dense_gemv<true><<<grid_up, kThreads, 0, stream>>>(w.w1, w.w3, offsets, w.inter, w.dim, x_sorted, act, w.activation, w.situ_beta,
                                                      w.situ_linear_beta);
  PDS_RETURN_IF_ERROR(last_launch_status("moe_expert_mlp_dense gate/up"));
  const dim3 grid_down(static_cast<unsigned>((w.dim + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(local_experts));
  dense_gemv<false><<<grid_down, kThreads, 0, stream>>>(w.w2, nullptr, offsets, w.dim, w.inter, act, out_sorted, w.activation,
                                                         w.situ_beta, w.situ_linear_beta);
  return last_launch_status("moe_expert_mlp_dense down");
}

}  // namespace pdserve::cuda
