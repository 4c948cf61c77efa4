// Shared pieces of the wgmma MLA prefill attention kernels (mla_prefill_wgmma_sm90.cu: cp.async
// forms; mla_prefill_wgmma_tma_sm90.cu: the TMA producer-warp forms): the tile geometry, where a
// CTA works, the two MMA issues of a key tile, the online softmax and the output store. Layout and
// design: docs/design.md "MLA prefill on tensor cores".
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "mla/mma_bf16.cuh"
#include "mla/wgmma_bf16.cuh"

namespace pdserve::cuda::mla_wg {

using bf16 = __nv_bfloat16;

inline constexpr int kQk = 192, kVd = 128;
inline constexpr int kRows = 128;                  // query rows per CTA (the plan's tile_rows)
inline constexpr int kKeys = 128;                  // keys per K/V tile (the N of S = Q K^T)
inline constexpr int kBlock = 128 * 128;           // bytes of one swizzled [128 rows][64 cols] block
inline constexpr int kQBytes = 3 * kBlock;         // qk 192 = 3 blocks
inline constexpr int kKBytes = 3 * kBlock;
inline constexpr int kVBytes = 2 * kBlock;         // v 128 = 2 blocks

// Where a CTA works: one head, 128 rows of one sequence; each warpgroup owns 64 of the rows.
struct Work {
  int row_begin, n, cached, kv_begin, ctx, row0, h, num_kt;
  int wg, warp, g, c4;
  int wg_row0, wg_rows, wg_first_pos, wg_num_kt;  // wg_num_kt: key tiles this warpgroup's rows reach
  int qpos0, qpos1;                               // this thread's two rows' positions
};

__device__ __forceinline__ Work find_work(const int32_t* __restrict__ plan) {
  Work w;
  const int seqs = plan[0];
  const int32_t* tw = plan + 4 + 4 * seqs + 2 * blockIdx.x;
  const int s = tw[0];
  w.row0 = tw[1], w.h = blockIdx.y;
  const int32_t* sw = plan + 4 + 4 * s;
  w.row_begin = sw[0], w.n = sw[1], w.cached = sw[2], w.kv_begin = sw[3];
  w.ctx = w.cached + w.n;
  const int last_pos = w.cached + min(w.n, w.row0 + kRows) - 1;
  w.num_kt = last_pos / kKeys + 1;  // causal skipping: no tile past the CTA's last position
  const int tid = threadIdx.x, lane = tid % 32;
  w.wg = tid / 128, w.warp = (tid % 128) / 32, w.g = lane / 4, w.c4 = lane % 4;
  w.wg_row0 = w.row0 + 64 * w.wg, w.wg_rows = min(w.n - w.wg_row0, 64);
  w.wg_first_pos = w.cached + w.wg_row0;
  w.wg_num_kt = w.wg_rows <= 0 ? 0 : (w.wg_first_pos + w.wg_rows - 1) / kKeys + 1;
  w.qpos0 = w.wg_first_pos + 16 * w.warp + w.g, w.qpos1 = w.qpos0 + 8;
  return w;
}

// S = Q K^T for this warpgroup's 64 rows and the 128 keys of the tile at ks (12 k steps).
// kOverwriteFirst: the first k step writes S without reading it (the TMA forms; lets the softmax
// of S run while P V is in flight, see wgmma::m64n128k16_ss_overwrite).
template <bool kOverwriteFirst = false>
__device__ __forceinline__ void issue_s(float (&sc)[64], uint32_t q_s, uint32_t ks, int wg) {
#pragma unroll
  for (int k = 0; k < kQk / 16; ++k) {
    const uint64_t da = wgmma::desc_sw128(q_s + (k / 4) * kBlock + wg * 64 * 128 + (k % 4) * 32, 16, 1024);
    const uint64_t db = wgmma::desc_sw128(ks + (k / 4) * kBlock + (k % 4) * 32, 16, 1024);
    if (kOverwriteFirst && k == 0)
      wgmma::m64n128k16_ss_overwrite(sc, da, db);
    else
      wgmma::m64n128k16_ss(sc, da, db, k > 0);
  }
}
// O += P V over the 128 keys of the tile at vs (8 k steps; V MN-major, 64-column blocks kBlock apart).
__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&p)[kKeys / 16][4], uint32_t vs) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) wgmma::m64n128k16_rs_mn(o, p[kk], wgmma::desc_sw128(vs + kk * 16 * 128, kBlock, 1024));
}

// Online softmax of key tile kt: scores -> unnormalised probabilities in place (fp32), the row
// maxima and sums updated; returns the factors the running output must be scaled by.
__device__ __forceinline__ float2 softmax_tile(float (&sc)[64], const Work& w, int kt, float scale_log2, float& m0, float& m1,
                                               float& l0, float& l1) {
  const bool mask = kt * kKeys + kKeys - 1 > w.wg_first_pos;  // the tile crosses some row's diagonal
  // Key kt * kKeys + 8t + 2 c4 + (e & 1) is past row qpos when 8t + (e & 1) > qpos - kt * kKeys - 2 c4:
  // one register a row, each test against an immediate (keeps registers free for the overlap).
  const int lim0 = w.qpos0 - kt * kKeys - 2 * w.c4, lim1 = lim0 + 8;
  float mx0 = m0, mx1 = m1;
#pragma unroll
  for (int t = 0; t < kKeys / 8; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = sc[4 * t + e] * scale_log2;
      if (mask && t * 8 + (e & 1) > (e < 2 ? lim0 : lim1)) v = -INFINITY;
      sc[4 * t + e] = v;
    }
    mx0 = fmaxf(mx0, fmaxf(sc[4 * t], sc[4 * t + 1]));
    mx1 = fmaxf(mx1, fmaxf(sc[4 * t + 2], sc[4 * t + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  // Key 0 is in every row's range and tile 0 comes first: the maxima are finite from here on.
  const float a0 = exp2f(m0 - mx0), a1 = exp2f(m1 - mx1);
  m0 = mx0, m1 = mx1;
  l0 *= a0, l1 *= a1;
#pragma unroll
  for (int t = 0; t < kKeys / 8; ++t) {
    sc[4 * t] = exp2f(sc[4 * t] - m0), sc[4 * t + 1] = exp2f(sc[4 * t + 1] - m0);
    sc[4 * t + 2] = exp2f(sc[4 * t + 2] - m1), sc[4 * t + 3] = exp2f(sc[4 * t + 3] - m1);
    l0 += sc[4 * t] + sc[4 * t + 1], l1 += sc[4 * t + 2] + sc[4 * t + 3];
  }
  return make_float2(a0, a1);
}

__device__ __forceinline__ void rescale(float (&o)[64], float2 a) {
#pragma unroll
  for (int t = 0; t < kVd / 8; ++t) o[4 * t] *= a.x, o[4 * t + 1] *= a.x, o[4 * t + 2] *= a.y, o[4 * t + 3] *= a.y;
}
// The C layout of two adjacent 8-key column tiles is the A fragment of one 16-key step.
__device__ __forceinline__ void pack_p(const float (&sc)[64], uint32_t (&p)[kKeys / 16][4]) {
#pragma unroll
  for (int t = 0; t < kKeys / 8; ++t) {
    p[t / 2][(t % 2) * 2] = mma::pack_bf16(sc[4 * t], sc[4 * t + 1]);
    p[t / 2][(t % 2) * 2 + 1] = mma::pack_bf16(sc[4 * t + 2], sc[4 * t + 3]);
  }
}

__device__ __forceinline__ void store_out(const Work& w, const float (&o)[64], float l0, float l1, int heads, float* __restrict__ out) {
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  const int qi0 = w.wg_row0 + 16 * w.warp + w.g, qi1 = qi0 + 8;
#pragma unroll
  for (int t = 0; t < kVd / 8; ++t) {
    const int col = t * 8 + w.c4 * 2;
    if (qi0 < w.n)
      *reinterpret_cast<float2*>(out + (int64_t(w.row_begin + qi0) * heads + w.h) * kVd + col) =
          make_float2(o[4 * t] * inv0, o[4 * t + 1] * inv0);
    if (qi1 < w.n)
      *reinterpret_cast<float2*>(out + (int64_t(w.row_begin + qi1) * heads + w.h) * kVd + col) =
          make_float2(o[4 * t + 2] * inv1, o[4 * t + 3] * inv1);
  }
}

__device__ __forceinline__ uint32_t smem_base() {
  extern __shared__ unsigned char smem_raw[];
  // The swizzle pattern repeats every 1024 bytes; descriptors assume atoms start on that boundary.
  return (mma::smem_addr(smem_raw) + 1023u) & ~1023u;
}

}  // namespace pdserve::cuda::mla_wg
