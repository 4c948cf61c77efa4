// Device helpers shared by the fused KDA decode plans (kda_decode_*_sm90.cu): the per-channel
// preamble (conv step, gate decay) and the delta rule on a warp's rows. Device code only.
#pragma once

#include "common/reduce.cuh"
#include "kda/kda.h"

namespace pdserve::cuda::kda_decode {

constexpr float kL2Eps = 1e-6f;  // the CPU layer's l2_normalize eps

// silu(conv step): the window is the channel's K-1 stored inputs then the current one.
__device__ __forceinline__ float conv_step(const float* st, const float* w, float x, int tail) {
  float acc = 0.0f;
  for (int j = 0; j < tail; ++j) acc += w[j] * st[j];
  acc += w[tail] * x;
  return acc * sigmoid(acc);
}

__device__ __forceinline__ void conv_shift(float* st, float x, int tail) {
  for (int j = 0; j + 1 < tail; ++j) st[j] = st[j + 1];
  if (tail > 0) st[tail - 1] = x;
}

// Conv kernel 4 with its taps in registers (the reference's summation order).
__device__ __forceinline__ float conv4_silu(float4 w, float s0, float s1, float s2, float x) {
  float acc = 0.0f;
  acc += w.x * s0, acc += w.y * s1, acc += w.z * s2, acc += w.w * x;
  return acc * sigmoid(acc);
}

// exp(g) for the gate input x = f + dt_bias, alpha = exp(A_log[h]): the lower-bound form or softplus.
__device__ __forceinline__ float gate_decay(const KdaDecodeArgs& a, float alpha, float x) {
  const float g = a.has_lower_bound ? a.lower_bound * sigmoid(alpha * x) : -alpha * (x > 20.0f ? x : log1pf(expf(x)));
  return expf(g);
}

// One head of one row, as the generic plans address it (runtime conv kernel K).
struct HeadRef {
  const KdaDecodeArgs& a;
  int64_t H, P, hd, row_base;  // heads, H*D, first channel of the head, its first input index
  int K, tail;
  float* layer;                // this row's slot, this layer's block; null for a padding row
  __device__ HeadRef(const KdaDecodeArgs& args, int D, int h, int b)
      : a(args), H(args.heads), P(args.heads * D), hd(int64_t(h) * D), row_base(b * P + hd), K(static_cast<int>(args.conv_kernel)),
        tail(K - 1) {
    const int32_t slot = args.slots[b];
    layer = slot < 0 ? nullptr : args.state + slot * args.slot_stride + args.layer_offset;
  }
  __device__ float* conv_q(int c) const { return layer + (hd + c) * tail; }
  __device__ float* conv_k(int c) const { return layer + (P + hd + c) * tail; }
  __device__ float* conv_v(int c) const { return layer + (2 * P + hd + c) * tail; }
  __device__ float* rec(int D) const { return layer + 3 * P * tail + hd * D; }
  // Channel c's inputs: raw q/k/v and the gate input f + dt_bias (slot-independent, so a
  // kernel can load them while the slot id is still on its way).
  struct Inputs {
    float xq, xk, xv, fx;
  };
  __device__ Inputs inputs(int c) const {
    return {a.q_raw[row_base + c], a.k_raw[row_base + c], a.v_raw[row_base + c], a.f[row_base + c] + a.dt_bias[hd + c]};
  }
  // Channel c's q and k (conv step, before the L2 norms) and decay; the windows are not shifted.
  __device__ void qk_decay(int c, const Inputs& x, float alpha, float& q, float& k, float& decay) const {
    q = conv_step(conv_q(c), a.conv_q + (hd + c) * K, x.xq, tail);
    k = conv_step(conv_k(c), a.conv_k + (hd + c) * K, x.xk, tail);
    decay = gate_decay(a, alpha, x.fx);
  }
  // Channel c's v (conv step) from its raw input xv, the window shifted: only the block owning
  // row c calls it.
  __device__ float v_shifted(int c, float xv) const {
    const float v = conv_step(conv_v(c), a.conv_v + (hd + c) * K, xv, tail);
    conv_shift(conv_v(c), xv, tail);
    return v;
  }
  // Padding row: zeros in the outputs [first, first + n) of this head, nothing else touched.
  __device__ void zero_out(int first, int n) const {
    for (int c = threadIdx.x; c < n; c += blockDim.x) a.out[row_base + first + c] = 0.0f;
  }
};

// Columns a lane holds: CPL = D/32 floats as float4 chunks 128 columns apart (float2 for D = 64),
// so each load/store instruction of a warp covers one contiguous 512 B span of a row
// (float2 / float for D = 64 / 32: 256 / 128 B).
template <int CPL>
struct Cols {
  static constexpr int kWidth = CPL >= 4 ? 4 : CPL, kChunks = CPL / kWidth;
  __device__ static int at(int lane, int chunk) { return chunk * 32 * kWidth + lane * kWidth; }
};

template <int CPL>
__device__ __forceinline__ void load_row(const float* row, int lane, float (&r)[CPL]) {
  using C = Cols<CPL>;
#pragma unroll
  for (int j = 0; j < C::kChunks; ++j) {
    if constexpr (C::kWidth == 4) {
      const float4 t = __ldcs(reinterpret_cast<const float4*>(row + C::at(lane, j)));
      r[4 * j] = t.x, r[4 * j + 1] = t.y, r[4 * j + 2] = t.z, r[4 * j + 3] = t.w;
    } else if constexpr (C::kWidth == 1) {
      r[j] = __ldcs(row + C::at(lane, j));
    } else {
      const float2 t = __ldcs(reinterpret_cast<const float2*>(row + C::at(lane, j)));
      r[2 * j] = t.x, r[2 * j + 1] = t.y;
    }
  }
}

template <int CPL>
__device__ __forceinline__ void store_row(float* row, int lane, const float (&r)[CPL]) {
  using C = Cols<CPL>;
#pragma unroll
  for (int j = 0; j < C::kChunks; ++j) {
    if constexpr (C::kWidth == 4)
      __stcs(reinterpret_cast<float4*>(row + C::at(lane, j)), make_float4(r[4 * j], r[4 * j + 1], r[4 * j + 2], r[4 * j + 3]));
    else if constexpr (C::kWidth == 1)
      __stcs(row + C::at(lane, j), r[j]);
    else
      __stcs(reinterpret_cast<float2*>(row + C::at(lane, j)), make_float2(r[2 * j], r[2 * j + 1]));
  }
}

template <int CPL>
__device__ __forceinline__ void load_smem(const float* s, int lane, float (&r)[CPL]) {
  using C = Cols<CPL>;
#pragma unroll
  for (int j = 0; j < C::kChunks; ++j)
#pragma unroll
    for (int e = 0; e < C::kWidth; ++e) r[C::kWidth * j + e] = s[C::at(lane, j) + e];
}

// The delta rule on RW rows of a warp (row i's state in s[i], its v in v[i]): decay,
// ks = S k, u = beta (v - ks), S += u k^T, o = S q; stores the rows at rec_row0 + i * D and
// returns the row outputs in lane i (i < RW).
template <int CPL, int RW>
__device__ __forceinline__ float delta_rule_rows(float (&s)[RW][CPL], const float (&kk)[CPL], const float (&qq)[CPL],
                                                 const float (&dd)[CPL], float beta, const float* v, float* rec_row0, int lane) {
  constexpr int D = 32 * CPL;
  float part[RW];
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    part[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) {
      s[i][e] *= dd[e];
      part[i] += s[i][e] * kk[e];
    }
  }
#pragma unroll
  for (int i = 0; i < RW; ++i) part[i] = warp_sum(part[i]);
  float out[RW];
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const float u = beta * (v[i] - part[i]);
    out[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) {
      s[i][e] += kk[e] * u;
      out[i] += s[i][e] * qq[e];
    }
    store_row<CPL>(rec_row0 + int64_t(i) * D, lane, s[i]);
  }
  float mine = 0.0f;
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    out[i] = warp_sum(out[i]);
    if (lane == i) mine = out[i];
  }
  return mine;
}

}  // namespace pdserve::cuda::kda_decode
