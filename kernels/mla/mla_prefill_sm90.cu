// The attention step of the MLA prefill (contract and design: mla_prefill.h): flash attention
// on mma.sync m16n8k16 bf16 over expanded K/V, fp32 online softmax in base 2.
#include <cuda_bf16.h>

#include <cmath>

#include "common/cuda_check.h"
#include "mla/mla_prefill.h"
#include "mla/mla_prefill_wgmma.h"
#include "mla/mma_bf16.cuh"

namespace pdserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using namespace mma;
constexpr int kKeys = static_cast<int>(kMlaPrefillKeyTile);  // keys per K/V tile

template <int QK, int VD, int WARPS>
struct Layout {
  static constexpr int kQRows = 16 * WARPS;  // query rows per CTA
  // Rows padded by 16 bytes: an odd number of 16-byte chunks per row, so the 8 row addresses
  // of every ldmatrix fall in distinct bank groups.
  static constexpr int kQS = QK + 8, kVS = VD + 8;
  static constexpr int kBytes = (kQRows * kQS + 2 * kKeys * kQS + 2 * kKeys * kVS) * 2;
};

template <int QK, int VD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, WARPS == 4 ? 2 : 1)
    attend_kernel(const bf16* __restrict__ qb, const bf16* __restrict__ kb, const bf16* __restrict__ vb, int heads, float scale_log2,
                  const int32_t* __restrict__ plan, float* __restrict__ out) {
  using L = Layout<QK, VD, WARPS>;
  constexpr int kQS = L::kQS, kVS = L::kVS, kQC = QK / 8, kVC = VD / 8, kQRows = L::kQRows, kThreads = 32 * WARPS;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* ks_base = qs + kQRows * kQS;
  bf16* vs_base = ks_base + 2 * kKeys * kQS;

  const int seqs = plan[0];
  const int32_t* tw = plan + 4 + 4 * seqs + 2 * blockIdx.x;
  const int s = tw[0], row0 = tw[1], h = blockIdx.y;
  const int32_t* sw = plan + 4 + 4 * s;
  const int row_begin = sw[0], n = sw[1], cached = sw[2], kv_begin = sw[3];
  const int ctx = cached + n;
  const int first_pos = cached + row0, last_pos = cached + min(n, row0 + kQRows) - 1;
  const int num_kt = last_pos / kKeys + 1;  // causal skipping: no tile past the last position

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c4 = lane % 4;
  for (int i = tid; i < kQRows * kQC; i += kThreads) {
    const int r = i / kQC, c = i % kQC, qi = row0 + r;
    const bool ok = qi < n;
    cp_async16(qs + r * kQS + c * 8, qb + (int64_t(row_begin + (ok ? qi : 0)) * heads + h) * QK + c * 8, ok ? 16 : 0);
  }
  auto load_kv = [&](int kt, int buf) {
    bf16* ks = ks_base + buf * kKeys * kQS;
    bf16* vs = vs_base + buf * kKeys * kVS;
    for (int i = tid; i < kKeys * kQC; i += kThreads) {
      const int r = i / kQC, c = i % kQC, kj = kt * kKeys + r;
      const bool ok = kj < ctx;  // zeros past the context: masked scores must not meet NaN values
      cp_async16(ks + r * kQS + c * 8, kb + (int64_t(kv_begin + (ok ? kj : 0)) * heads + h) * QK + c * 8, ok ? 16 : 0);
    }
    for (int i = tid; i < kKeys * kVC; i += kThreads) {
      const int r = i / kVC, c = i % kVC, kj = kt * kKeys + r;
      const bool ok = kj < ctx;
      cp_async16(vs + r * kVS + c * 8, vb + (int64_t(kv_begin + (ok ? kj : 0)) * heads + h) * VD + c * 8, ok ? 16 : 0);
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  uint32_t qf[QK / 16][4];
  float o[VD / 8][4];
#pragma unroll
  for (int d = 0; d < VD / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int qpos0 = cached + row0 + warp * 16 + g, qpos1 = qpos0 + 8;  // this thread's two rows

  for (int kt = 0; kt < num_kt; ++kt) {
    cp_async_wait<0>();
    __syncthreads();  // tile kt landed; every warp is done with tile kt - 1 (the buffer refilled next)
    if (kt == 0) {
#pragma unroll
      for (int k = 0; k < QK / 16; ++k) ldmatrix_x4(qf[k], qs + (warp * 16 + lane % 16) * kQS + k * 16 + (lane / 16) * 8);
    }
    if (kt + 1 < num_kt) load_kv(kt + 1, (kt + 1) & 1);
    cp_async_commit();
    const bf16* ks = ks_base + (kt & 1) * kKeys * kQS;
    const bf16* vs = vs_base + (kt & 1) * kKeys * kVS;

    float sc[kKeys / 8][4];
#pragma unroll
    for (int t = 0; t < kKeys / 8; ++t) sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < QK / 16; ++k) {
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ks + (np * 16 + lane % 8 + (lane / 16) * 8) * kQS + k * 16 + ((lane / 8) % 2) * 8);
        mma_bf16(sc[2 * np], qf[k], b[0], b[1]);
        mma_bf16(sc[2 * np + 1], qf[k], b[2], b[3]);
      }
    }
    const bool mask = kt * kKeys + kKeys - 1 > first_pos;  // the tile crosses some row's diagonal
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int t = 0; t < kKeys / 8; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = sc[t][e] * scale_log2;
        if (mask && kt * kKeys + t * 8 + c4 * 2 + (e & 1) > (e < 2 ? qpos0 : qpos1)) v = -INFINITY;
        sc[t][e] = v;
      }
      mx0 = fmaxf(mx0, fmaxf(sc[t][0], sc[t][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[t][2], sc[t][3]));
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
    for (int d = 0; d < VD / 8; ++d) o[d][0] *= a0, o[d][1] *= a0, o[d][2] *= a1, o[d][3] *= a1;
#pragma unroll
    for (int t = 0; t < kKeys / 8; ++t) {
      sc[t][0] = exp2f(sc[t][0] - m0), sc[t][1] = exp2f(sc[t][1] - m0);
      sc[t][2] = exp2f(sc[t][2] - m1), sc[t][3] = exp2f(sc[t][3] - m1);
      l0 += sc[t][0] + sc[t][1], l1 += sc[t][2] + sc[t][3];
    }
    // The C fragments of two adjacent 8-key tiles are the A fragment of one 16-key step.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), pack_bf16(sc[2 * kk][2], sc[2 * kk][3]),
                             pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < VD / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kVS + dp * 16 + (lane / 16) * 8);
        mma_bf16(o[2 * dp], a, b[0], b[1]);
        mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  const int qi0 = row0 + warp * 16 + g, qi1 = qi0 + 8;
#pragma unroll
  for (int d = 0; d < VD / 8; ++d) {
    const int col = d * 8 + c4 * 2;
    if (qi0 < n)
      *reinterpret_cast<float2*>(out + (int64_t(row_begin + qi0) * heads + h) * VD + col) = make_float2(o[d][0] * inv0, o[d][1] * inv0);
    if (qi1 < n)
      *reinterpret_cast<float2*>(out + (int64_t(row_begin + qi1) * heads + h) * VD + col) = make_float2(o[d][2] * inv1, o[d][3] * inv1);
  }
}

template <int QK, int VD, int WARPS>
Status launch(const void* qb, const void* kb, const void* vb, int64_t heads, float scale, const MlaPrefillPlan& p, const int32_t* plan,
              float* out, cudaStream_t stream) {
  constexpr int bytes = Layout<QK, VD, WARPS>::kBytes;
  // Per call: the attribute belongs to the current device (TP ranks each own one); not a stream op.
  PDS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(attend_kernel<QK, VD, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                                  "mla prefill: shared memory attribute"));
  const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(heads));
  attend_kernel<QK, VD, WARPS><<<grid, 32 * WARPS, bytes, stream>>>(static_cast<const bf16*>(qb), static_cast<const bf16*>(kb),
                                                         static_cast<const bf16*>(vb), static_cast<int>(heads),
                                                         scale * 1.4426950408889634f, plan, out);
  return last_launch_status("mla_prefill_attend");
}

}  // namespace

Status mla_prefill_attend(const void* qb, const void* kb, const void* vb, int64_t heads, int64_t qk, int64_t v_dim, float scale,
                          const MlaPrefillPlan& plan_host, const int32_t* plan, float* out, cudaStream_t stream) {
  if (plan_host.tiles == 0) return Status::ok();
  if (heads <= 0 || heads > 65535 || plan_host.tiles > INT32_MAX) return invalid_argument("mla_prefill_attend: bad grid");
  if (plan_host.kernel != MlaPrefillKernel::kMmaSync && mla_prefill_wgmma_has_kernel(qk, v_dim))
    return mla_prefill_attend_wgmma(qb, kb, vb, heads, scale, plan_host, plan, out, stream);
  const bool wide = plan_host.tile_rows == 128;
  if (!wide && plan_host.tile_rows != 64) return invalid_argument("mla_prefill_attend: tile_rows must be 64 or 128");
  if (qk == 192 && v_dim == 128)
    return wide ? launch<192, 128, 8>(qb, kb, vb, heads, scale, plan_host, plan, out, stream)
                : launch<192, 128, 4>(qb, kb, vb, heads, scale, plan_host, plan, out, stream);
  if (qk == 32 && v_dim == 16)
    return wide ? launch<32, 16, 8>(qb, kb, vb, heads, scale, plan_host, plan, out, stream)
                : launch<32, 16, 4>(qb, kb, vb, heads, scale, plan_host, plan, out, stream);
  return invalid_argument("mla_prefill_attend: no kernel for qk " + std::to_string(qk) + " x v " + std::to_string(v_dim));
}

}  // namespace pdserve::cuda
