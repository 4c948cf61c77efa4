// moe_expert_mlp (contract: moe.h): grouped MXFP4 GEMV, correct-first.
// One warp per (expert, output row). Each lane takes whole groups of 32 inputs (one
// 16-byte load of packed nibbles and one scale byte, decoded in registers), lanes side by
// side, so a warp reads a row contiguously; kIters groups per lane are loaded before the
// first is used. The expert's rows are taken kTok at a time, so a weight row comes from
// memory once per kTok rows (L2 serves the re-reads). A group's partial sum is scaled by
// its power-of-two scale, which is exact: the result is the CPU's dot product of the
// dequantised values up to summation order.
#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "moe/moe.h"
#include "moe/moe_activation.cuh"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerBlock = kThreads / 32;
constexpr int kTok = 4;
constexpr int kIters = 2;

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

__device__ __forceinline__ uint32_t word(const uint4& q, int i) { return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w; }

__device__ __forceinline__ float dot8(const float* w, float4 u, float4 v) {
  return w[0] * u.x + w[1] * u.y + w[2] * u.z + w[3] * u.w + w[4] * v.x + w[5] * v.y + w[6] * v.z + w[7] * v.w;
}

// y[row, r] = act(x[row] . A[e, r], x[row] . B[e, r]) (gated) or x[row] . A[e, r], for the
// rows of expert e = blockIdx.y. x: [*, cols]; y: [*, a.rows]. A lane's groups are
// lane, lane + 32, ...: up to kIters of them are loaded before any is used, so a warp has
// its whole row (cols <= 4096) in flight at once; longer rows take several passes.
template <bool kGated>
__global__ void __launch_bounds__(kThreads) grouped_gemv(Mxfp4Experts a, Mxfp4Experts b, const int32_t* __restrict__ offsets,
                                                         const float* __restrict__ x, float* __restrict__ y, MoeAct act) {
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
    const int nt = min(kTok, end - t0);
    float acc_a[kTok], acc_b[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc_a[t] = acc_b[t] = 0.0f;
    for (int64_t g0 = lane; g0 < groups; g0 += 32 * kIters) {
      uint4 qa[kIters], qb[kIters];
      float ska[kIters], skb[kIters];
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int64_t g = g0 + 32 * i;
        if (g < groups) {
          qa[i] = __ldg(reinterpret_cast<const uint4*>(pa + g * 16));
          ska[i] = e8m0(__ldg(sa + g));
          if (kGated) {
            qb[i] = __ldg(reinterpret_cast<const uint4*>(pb + g * 16));
            skb[i] = e8m0(__ldg(sb + g));
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int64_t g = g0 + 32 * i;
        if (g >= groups) break;
        // Word by word (8 inputs), so only 8 decoded weights of each matrix are live.
        float part_a[kTok], part_b[kTok];
#pragma unroll
        for (int t = 0; t < kTok; ++t) part_a[t] = part_b[t] = 0.0f;
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {
          float wa[8], wb[8];
          decode_word(word(qa[i], wi), wa);
          if (kGated) decode_word(word(qb[i], wi), wb);
#pragma unroll
          for (int t = 0; t < kTok; ++t) {
            if (t < nt) {
              const float4* x4 = reinterpret_cast<const float4*>(x + int64_t(t0 + t) * cols + g * 32 + wi * 8);
              const float4 u = x4[0], v = x4[1];
              part_a[t] += dot8(wa, u, v);
              if (kGated) part_b[t] += dot8(wb, u, v);
            }
          }
        }
#pragma unroll
        for (int t = 0; t < kTok; ++t) {
          acc_a[t] = fmaf(part_a[t], ska[i], acc_a[t]);
          if (kGated) acc_b[t] = fmaf(part_b[t], skb[i], acc_b[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t < nt) {  // nt is the same for the whole warp
        const float sa_t = warp_sum(acc_a[t]);
        const float sb_t = kGated ? warp_sum(acc_b[t]) : 0.0f;
        if (lane == 0) y[int64_t(t0 + t) * a.rows + r] = kGated ? act(sa_t, sb_t) : sa_t;
      }
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
  const MoeAct a{w.activation, w.situ_beta, w.situ_linear_beta};
  const dim3 grid_up(static_cast<unsigned>((inter + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(local_experts));
  grouped_gemv<true><<<grid_up, kThreads, 0, stream>>>(w.w1, w.w3, offsets, x_sorted, act, a);
  PDS_RETURN_IF_ERROR(last_launch_status("moe_expert_mlp gate/up"));
  const dim3 grid_down(static_cast<unsigned>((dim + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(local_experts));
  grouped_gemv<false><<<grid_down, kThreads, 0, stream>>>(w.w2, w.w2, offsets, act, out_sorted, a);
  return last_launch_status("moe_expert_mlp down");
}

}  // namespace pdserve::cuda
