// The fused KDA decode step, push plan (contract: kda.h). Conv kernel 4 is a compile-time
// constant, so every tap is one independent load; every input is loaded before the first store
// (the slot id is the only load anything waits on); a head's blocks exchange q, k, decays and
// outputs by writing them into every peer's shared memory before a cluster barrier, so a step
// is two memory trips and two barriers: no fences, atomics or block-wide reductions (each warp
// redoes the norms over the D values it already holds, with shuffles).
#include <cooperative_groups.h>

#include "common/cuda_check.h"
#include "common/per_device.h"
#include "common/pdl_bulk.cuh"
#include "common/reduce.cuh"
#include "kda/kda.h"
#include "kda/kda_decode_common.cuh"
#include "kda/kda_decode_push.h"

namespace pdserve::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace kda_decode;
constexpr int kConv = 4;

// Split cluster barrier: arrive early, wait late (.aligned: every thread of the warp calls it).
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// W warps of RW rows each; a head's D rows over CS = D / (W*RW) blocks of one cluster.
template <int CPL, int RW, int W>
__global__ void __launch_bounds__(32 * W) kda_decode_push_kernel(const __grid_constant__ KdaDecodeArgs a) {
  constexpr int D = 32 * CPL, R = W * RW, CS = D / R, T = 32 * W;
  static_assert(CPL == 4 && CS >= 1 && CS <= 16 && RW * CS <= 32, "one float4 per lane; a warp pushes its outputs at once");
  __shared__ __align__(16) float sq[D], sk[D], sdecay[D], so[D];
  const int rank = CS > 1 ? static_cast<int>(blockIdx.x) : 0, h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, first = rank * R;
  const int64_t H = a.heads, P = H * D, hd = h * int64_t(D), row_base = b * P + hd;
  if constexpr (CS > 1) cluster_arrive_relaxed();  // peers must have started before we write them

  // Weights, the slot and the slot's state first: none of them is written by the kernel just
  // before (kda.h), so with a.pdl they are in flight while it drains. All loads are issued
  // before the first use (the slot id is the only load anything waits on).
  // Item: channel ci of this block, pushed to peer pi (each channel computed by CS threads).
  const bool has_item = tid < D;
  const int ci = first + tid % R, pi = tid / R;
  const int row0 = first + warp * RW, vrow = row0 + lane % RW;  // lane i < RW: v of row row0 + i
  const float4 wq = __ldg(reinterpret_cast<const float4*>(a.conv_q) + hd + ci);
  const float4 wk = __ldg(reinterpret_cast<const float4*>(a.conv_k) + hd + ci);
  const float4 wv = __ldg(reinterpret_cast<const float4*>(a.conv_v) + hd + vrow);
  const float dtb = __ldg(a.dt_bias + hd + ci), alpha = expf(__ldg(a.a_log + h)), onorm = __ldg(a.o_norm + ci);
  const int32_t slot = __ldg(a.slots + b);
  // The slot's state: recurrent rows (streamed), then the three conv windows.
  float* layer = a.state + int64_t(slot < 0 ? 0 : slot) * a.slot_stride + a.layer_offset;
  float* rec = layer + 3 * P * (kConv - 1) + hd * D;
  float* cq = layer + (hd + ci) * (kConv - 1);
  float* ck = layer + (P + hd + ci) * (kConv - 1);
  float* cv = layer + (2 * P + hd + vrow) * (kConv - 1);
  float4 s[RW];
  float q0 = 0, q1 = 0, q2 = 0, k0 = 0, k1 = 0, k2 = 0, v0 = 0, v1 = 0, v2 = 0;
  if (slot >= 0) {
#pragma unroll
    for (int i = 0; i < RW; ++i) s[i] = __ldcs(reinterpret_cast<const float4*>(rec + int64_t(row0 + i) * D) + lane);
    q0 = cq[0], q1 = cq[1], q2 = cq[2], k0 = ck[0], k1 = ck[1], k2 = ck[2], v0 = cv[0], v1 = cv[1], v2 = cv[2];
  }
  pdl_bulk::pdl_wait();  // the projections may come from the kernel just before
  pdl_bulk::pdl_trigger();
  const float xq = __ldg(a.q_raw + row_base + ci), xk = __ldg(a.k_raw + row_base + ci);
  const float fx = __ldg(a.f + row_base + ci) + dtb;
  const float beta = sigmoid(__ldg(a.beta_logit + b * H + h));
  const float xv = __ldg(a.v_raw + row_base + vrow);
  const float ogate = __ldg(a.out_gate + row_base + ci);
  if (slot < 0) {  // padding row, uniform over the cluster: zeros out, no state touched
    if (tid < R) a.out[row_base + ci] = 0.0f;
    if constexpr (CS > 1) cluster_wait();  // pairs the early arrive; no peer is written
    return;
  }

  const float q = conv4_silu(wq, q0, q1, q2, xq), k = conv4_silu(wk, k0, k1, k2, xk), v = conv4_silu(wv, v0, v1, v2, xv);
  const float decay = gate_decay(a, alpha, fx);
  if constexpr (CS > 1) {
    cluster_wait();
    if (has_item) {
      cg::cluster_group cluster = cg::this_cluster();
      cluster.map_shared_rank(sq, pi)[ci] = q;
      cluster.map_shared_rank(sk, pi)[ci] = k;
      cluster.map_shared_rank(sdecay, pi)[ci] = decay;
    }
    cluster_arrive_release();
    cluster_wait();  // 1: the head's q, k and decays are in every block
  } else {
    if (has_item) sq[ci] = q, sk[ci] = k, sdecay[ci] = decay;
    __syncthreads();
  }
  // Every read of this block's conv windows happened before the barrier: shift them now.
  if (has_item && pi == 0) {
    cq[0] = q1, cq[1] = q2, cq[2] = xq;
    ck[0] = k1, ck[1] = k2, ck[2] = xk;
  }
  if (lane < RW) cv[0] = v1, cv[1] = v2, cv[2] = xv;

  const float4 kk = reinterpret_cast<const float4*>(sk)[lane], qr = reinterpret_cast<const float4*>(sq)[lane];
  const float4 dd = reinterpret_cast<const float4*>(sdecay)[lane];
  const float ssq = warp_sum(qr.x * qr.x + qr.y * qr.y + qr.z * qr.z + qr.w * qr.w);
  const float ssk = warp_sum(kk.x * kk.x + kk.y * kk.y + kk.z * kk.z + kk.w * kk.w);
  const float q_mul = 1.0f / sqrtf(ssq + kL2Eps) * (1.0f / sqrtf(static_cast<float>(D))), k_mul = 1.0f / sqrtf(ssk + kL2Eps);
  const float4 kn = make_float4(kk.x * k_mul, kk.y * k_mul, kk.z * k_mul, kk.w * k_mul);
  const float4 qn = make_float4(qr.x * q_mul, qr.y * q_mul, qr.z * q_mul, qr.w * q_mul);

  // The delta rule on this warp's rows: decay, ks = S k, u = beta (v - ks), S += u k^T, o = S q.
  float part[RW], out[RW];
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    s[i].x *= dd.x, s[i].y *= dd.y, s[i].z *= dd.z, s[i].w *= dd.w;
    part[i] = s[i].x * kn.x + s[i].y * kn.y + s[i].z * kn.z + s[i].w * kn.w;
  }
#pragma unroll
  for (int i = 0; i < RW; ++i) part[i] = warp_sum(part[i]);
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const float u = beta * (__shfl_sync(0xffffffffu, v, i) - part[i]);
    s[i].x += kn.x * u, s[i].y += kn.y * u, s[i].z += kn.z * u, s[i].w += kn.w * u;
    out[i] = s[i].x * qn.x + s[i].y * qn.y + s[i].z * qn.z + s[i].w * qn.w;
    __stcs(reinterpret_cast<float4*>(rec + int64_t(row0 + i) * D) + lane, s[i]);
  }
#pragma unroll
  for (int i = 0; i < RW; ++i) out[i] = warp_sum(out[i]);
  // Lane l sends row l % RW's output to peer l / RW.
  float mine = 0.0f;
#pragma unroll
  for (int i = 0; i < RW; ++i)
    if (lane % RW == i) mine = out[i];
  if constexpr (CS > 1) {
    if (lane < RW * CS) cg::this_cluster().map_shared_rank(so, lane / RW)[row0 + lane % RW] = mine;
    cluster_arrive_release();
    cluster_wait();  // 2: the head's outputs are in every block; nothing remote after this
  } else {
    if (lane < RW) so[row0 + lane] = mine;
    __syncthreads();
  }
  const float4 oo = reinterpret_cast<const float4*>(so)[lane];
  const float ss = warp_sum(oo.x * oo.x + oo.y * oo.y + oo.z * oo.z + oo.w * oo.w);
  const float inv = 1.0f / sqrtf(ss / D + a.norm_eps);
  if (tid < R) a.out[row_base + ci] = so[ci] * inv * onorm * sigmoid(ogate);
  (void)T;
}

template <int CPL, int RW, int W>
Status launch_push(const KdaDecodeArgs& a, cudaStream_t stream) {
  constexpr int cs = 32 * CPL / (W * RW);
  auto* kernel = kda_decode_push_kernel<CPL, RW, W>;
  if constexpr (cs > 8) {  // 16 needs the non-portable size (Hopper allows it)
    static PerDevice<cudaError_t> allowed_on;  // the attribute is per GPU (common/per_device.h)
    const cudaError_t allowed = allowed_on.get([&] { return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1); });
    PDS_RETURN_IF_ERROR(cuda_status(allowed, "kda_decode_step: cluster size 16"));
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cs, static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  cfg.blockDim = dim3(32 * W);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cs > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cs, attr[n].val.clusterDim.y = 1, attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (a.pdl) {  // kda.h: the step may start while the kernel before it drains
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cuda_status(cudaLaunchKernelEx(&cfg, kernel, a), "kda_decode_step (push)");
}

}  // namespace

Status kda_decode_push_step(const KdaDecodeArgs& a, int rows_per_warp, int warps, cudaStream_t stream) {
  if (a.head_dim != 128 || a.conv_kernel != kConv) return invalid_argument("kda_decode_step: the push plan needs head_dim 128 and conv kernel 4");
  const Status bad = invalid_argument("kda_decode_step: no push kernel for these rows_per_warp and warps");
  switch (warps) {
    case 4:
      switch (rows_per_warp) {
        case 2: return launch_push<4, 2, 4>(a, stream);
        case 4: return launch_push<4, 4, 4>(a, stream);
        case 8: return launch_push<4, 8, 4>(a, stream);
        case 16: return launch_push<4, 16, 4>(a, stream);
        default: return bad;
      }
    case 8:
      switch (rows_per_warp) {
        case 2: return launch_push<4, 2, 8>(a, stream);
        case 4: return launch_push<4, 4, 8>(a, stream);
        case 8: return launch_push<4, 8, 8>(a, stream);
        case 16: return launch_push<4, 16, 8>(a, stream);
        default: return bad;
      }
    case 16: return rows_per_warp == 8 ? launch_push<4, 8, 16>(a, stream) : bad;
    default: return bad;
  }
}

}  // namespace pdserve::cuda
