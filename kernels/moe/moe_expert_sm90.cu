// moe_expert_mlp (contract: moe.h): grouped MXFP4 GEMV, correct-first.
// One warp per (expert, output row). Each lane takes whole groups of 32 inputs: one
// 16-byte load of packed nibbles and one scale byte, decoded in registers; the warp reads
// a row's bytes contiguously. The rows of the expert are taken kTok at a time, so a weight
// row is read from memory once per kTok rows (L2 serves the re-reads). The partial sum of
// a group is scaled by its power-of-two scale, which is exact, so the result is the
// CPU's dot of dequantised values up to summation order.
#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "moe/moe.h"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;
constexpr int kTok = 8;

// E2M1 code -> float, exactly: exponent bits e (bias 1), mantissa bit m, sign bit 3.
__device__ __forceinline__ float e2m1(uint32_t c) {
  const uint32_t e = (c >> 1) & 3u, m = c & 1u;
  uint32_t bits = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3f000000u : 0u);
  return __uint_as_float(bits | ((c & 8u) << 28));
}

// 2^(s - 127); s = 0 is the subnormal 2^-127, s = 255 NaN (as e8m0_to_f32).
__device__ __forceinline__ float e8m0(uint32_t s) {
  if (s == 0) return __uint_as_float(0x00400000u);
  if (s == 255) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(s << 23);
}

// Byte j of a row holds element 2j in its low nibble: word bits 4i..4i+3 are element i.
__device__ __forceinline__ void decode_word(uint32_t word, float* w) {
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = e2m1((word >> (4 * j)) & 0xfu);
}

__device__ __forceinline__ void decode_group(uint4 q, float* w) {
  decode_word(q.x, w);
  decode_word(q.y, w + 8);
  decode_word(q.z, w + 16);
  decode_word(q.w, w + 24);
}

__device__ __forceinline__ float group_dot(const float* w, const float* x) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v = x4[i];
    s += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
  }
  return s;
}

struct Act {
  MoeActivation kind;
  float beta, linear_beta;
  __device__ float operator()(float g, float u) const {
    if (kind == MoeActivation::kSiLU) return g * sigmoid(g) * u;
    const float a = beta * tanhf(g / beta) * sigmoid(g);
    return a * (linear_beta > 0.0f ? linear_beta * tanhf(u / linear_beta) : u);
  }
};

// y[row, r] = act(x[row] . A[e, r], x[row] . B[e, r]) (gated) or x[row] . A[e, r], for the
// rows of expert e = blockIdx.y. x: [*, cols]; y: [*, a.rows].
template <bool kGated>
__global__ void __launch_bounds__(kThreads) grouped_gemv(Mxfp4Experts a, Mxfp4Experts b, const int32_t* __restrict__ offsets,
                                                         const float* __restrict__ x, float* __restrict__ y, Act act) {
  const int64_t e = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= a.rows) return;
  const int32_t begin = offsets[e], end = offsets[e + 1];
  const int64_t cols = a.cols, groups = cols / 32;
  const uint8_t* pa = a.packed + (e * a.rows + r) * (cols / 2);
  const uint8_t* sa = a.scales + (e * a.rows + r) * groups;
  const uint8_t* pb = kGated ? b.packed + (e * b.rows + r) * (cols / 2) : nullptr;
  const uint8_t* sb = kGated ? b.scales + (e * b.rows + r) * groups : nullptr;
  for (int32_t t0 = begin; t0 < end; t0 += kTok) {
    float acc_a[kTok], acc_b[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc_a[t] = acc_b[t] = 0.0f;
    for (int64_t g = lane; g < groups; g += 32) {
      float wa[32], wb[32];
      decode_group(*reinterpret_cast<const uint4*>(pa + g * 16), wa);
      const float scale_a = e8m0(sa[g]);
      float scale_b = 0.0f;
      if (kGated) {
        decode_group(*reinterpret_cast<const uint4*>(pb + g * 16), wb);
        scale_b = e8m0(sb[g]);
      }
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t0 + t < end) {
          const float* xr = x + int64_t(t0 + t) * cols + g * 32;
          acc_a[t] = fmaf(group_dot(wa, xr), scale_a, acc_a[t]);
          if (kGated) acc_b[t] = fmaf(group_dot(wb, xr), scale_b, acc_b[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      const float sa_t = warp_sum(acc_a[t]);
      const float sb_t = kGated ? warp_sum(acc_b[t]) : 0.0f;
      if (lane == 0 && t0 + t < end) y[int64_t(t0 + t) * a.rows + r] = kGated ? act(sa_t, sb_t) : sa_t;
    }
  }
}

Status check(const Mxfp4Experts& m, int64_t rows, int64_t cols, const char* what) {
  if (!m.packed || !m.scales || m.rows != rows || m.cols != cols || cols % 32)
    return invalid_argument(std::string("moe_expert_mlp: bad shape for ") + what);
  return Status::ok();
}

}  // namespace

Status moe_expert_mlp(const MoeExpertWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                      const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream) {
  const int64_t inter = w.w1.rows, dim = w.w1.cols;
  PDS_RETURN_IF_ERROR(check(w.w1, inter, dim, "w1"));
  PDS_RETURN_IF_ERROR(check(w.w3, inter, dim, "w3"));
  PDS_RETURN_IF_ERROR(check(w.w2, dim, inter, "w2"));
  if (local_experts <= 0 || local_experts > 65535) return invalid_argument("moe_expert_mlp: local_experts must be 1..65535");
  if (capacity == 0) return Status::ok();
  const Act a{w.activation, w.situ_beta, w.situ_linear_beta};
  const dim3 grid_up(static_cast<unsigned>((inter + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(local_experts));
  grouped_gemv<true><<<grid_up, kThreads, 0, stream>>>(w.w1, w.w3, offsets, x_sorted, act, a);
  PDS_RETURN_IF_ERROR(last_launch_status("moe_expert_mlp gate/up"));
  const dim3 grid_down(static_cast<unsigned>((dim + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(local_experts));
  grouped_gemv<false><<<grid_down, kThreads, 0, stream>>>(w.w2, w.w2, offsets, act, out_sorted, a);
  return last_launch_status("moe_expert_mlp down");
}

}  // namespace pdserve::cuda
