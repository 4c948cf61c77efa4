// The fused KDA decode step (contract and thread mapping: kda.h). One launch per layer.
#include <cooperative_groups.h>

#include "common/cuda_check.h"
#include "common/per_device.h"
#include "common/reduce.cuh"
#include "kda/kda.h"
#include "kda/kda_decode_common.cuh"
#include "kda/kda_decode_push.h"

namespace pdserve::cuda {

namespace {

using namespace kda_decode;
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kMaxHeadDim = 256;

// RW rows at a time per warp (registers: RW * CPL floats of state), `passes` times.
template <int CPL, int RW>
__global__ void __launch_bounds__(kThreads) kda_decode_kernel(const __grid_constant__ KdaDecodeArgs a, int passes) {
  constexpr int D = 32 * CPL;
  __shared__ float sq[D], sk[D], sdecay[D], so[D];
  __shared__ float sv[kMaxHeadDim];
  __shared__ int s_last;
  const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z, splits = gridDim.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rows_per_block = kWarps * RW * passes, first_row = split * rows_per_block;
  const HeadRef hr(a, D, h, b);
  if (!hr.layer) return hr.zero_out(first_row, rows_per_block);  // padding row (uniform per block)
  float* rec = hr.rec(D);

  // The first pass's state rows go in flight before the preamble, which does not need them.
  float s[RW][CPL], next[RW][CPL];
  const int warp_row0 = first_row + warp * RW * passes;
#pragma unroll
  for (int i = 0; i < RW; ++i) load_row<CPL>(rec + int64_t(warp_row0 + i) * D, lane, s[i]);

  // Preamble, per head: q/k conv + L2 norm, the decays, beta; v only for this block's rows
  // (this block alone owns their conv state).
  float ssq = 0.0f, ssk = 0.0f;
  const float alpha = expf(a.a_log[h]);
  for (int c = tid; c < D; c += kThreads) {
    float q, k, decay;
    hr.qk_decay(c, hr.inputs(c), alpha, q, k, decay);
    sq[c] = q, sk[c] = k, sdecay[c] = decay;
    ssq += q * q, ssk += k * k;
  }
  for (int r = tid; r < rows_per_block; r += kThreads) sv[r] = hr.v_shifted(first_row + r, a.v_raw[hr.row_base + first_row + r]);
  ssq = block_sum(ssq);
  ssk = block_sum(ssk);
  const float q_mul = 1.0f / sqrtf(ssq + kL2Eps) * (1.0f / sqrtf(static_cast<float>(D)));
  const float k_mul = 1.0f / sqrtf(ssk + kL2Eps);
  for (int c = tid; c < D; c += kThreads) sq[c] *= q_mul, sk[c] *= k_mul;
  __syncthreads();
  const float beta = sigmoid(a.beta_logit[b * hr.H + h]);
  float kk[CPL], qq[CPL], dd[CPL];
  load_smem<CPL>(sk, lane, kk);
  load_smem<CPL>(sq, lane, qq);
  load_smem<CPL>(sdecay, lane, dd);

  for (int p = 0; p < passes; ++p) {
    const int row0 = warp_row0 + p * RW;
    if (p > 0) {  // the rows prefetched during the previous pass
#pragma unroll
      for (int i = 0; i < RW; ++i)
#pragma unroll
        for (int e = 0; e < CPL; ++e) s[i][e] = next[i][e];
    }
    if (p + 1 < passes) {
#pragma unroll
      for (int i = 0; i < RW; ++i) load_row<CPL>(rec + int64_t(row0 + RW + i) * D, lane, next[i]);
    }
    const float mine = delta_rule_rows<CPL, RW>(s, kk, qq, dd, beta, sv + row0 - first_row, rec + int64_t(row0) * D, lane);
    if (lane < RW) {
      if (splits == 1)
        so[row0 + lane] = mine;
      else
        a.out[hr.row_base + row0 + lane] = mine;  // raw o; the head's last block normalises it
    }
  }

  // Only the head's last block goes on: every other block has read the q/k conv state and
  // written its raw outputs by then (fence, then ticket), so the writes below race nothing.
  if (splits > 1) {
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      int32_t* ticket = a.tickets + b * hr.H + h;
      s_last = atomicAdd(ticket, 1) == splits - 1;
      if (s_last) atomicExch(ticket, 0);  // zero again for the next launch
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int c = tid; c < D; c += kThreads) so[c] = __ldcg(a.out + hr.row_base + c);
  }
  __syncthreads();
  float ss = 0.0f;
  for (int c = tid; c < D; c += kThreads) {
    conv_shift(hr.conv_q(c), a.q_raw[hr.row_base + c], hr.tail);
    conv_shift(hr.conv_k(c), a.k_raw[hr.row_base + c], hr.tail);
    ss += so[c] * so[c];
  }
  ss = block_sum(ss);
  const float inv = 1.0f / sqrtf(ss / D + a.norm_eps);
  for (int c = tid; c < D; c += kThreads)
    a.out[hr.row_base + c] = so[c] * inv * a.o_norm[c] * sigmoid(a.out_gate[hr.row_base + c]);
}

namespace cg = cooperative_groups;

// Cluster plan: the CS = D/(4*RW) blocks of one head are one thread-block cluster; block r owns
// rows v and channels c in [r*R, r*R + R), R = 4*RW. Each channel's conv step, conv-state shift
// and gate run once, in its owner; q, k, decays and the norms' partial sums travel through
// distributed shared memory between three cluster barriers (no global fences, no atomics).
template <int CPL, int RW>
__global__ void __launch_bounds__(kThreads) kda_decode_cluster_kernel(const __grid_constant__ KdaDecodeArgs a) {
  constexpr int D = 32 * CPL, R = kWarps * RW;
  __shared__ float sq[D], sk[D], sdecay[D];
  __shared__ float own_q[R], own_k[R], own_decay[R], own_v[R], own_o[R], warp_ss[kWarps];
  __shared__ float own_ss[3];  // this block's sum of q^2, k^2 over its channels, o^2 over its rows
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = blockIdx.x, cs = gridDim.x, h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, first = rank * R;
  const HeadRef hr(a, D, h, b);
  // This block's channels' inputs go in flight with the slot id, before the padding test.
  const int c = first + (tid < R ? tid : 0);
  const HeadRef::Inputs x = hr.inputs(c);
  const float alpha = expf(a.a_log[h]), beta = sigmoid(a.beta_logit[b * hr.H + h]);
  // Padding row: the whole cluster (one head of one row) leaves before its first barrier.
  if (!hr.layer) return hr.zero_out(first, R);
  float* rec = hr.rec(D);

  float s[RW][CPL];
  const int row0 = first + warp * RW;
#pragma unroll
  for (int i = 0; i < RW; ++i) load_row<CPL>(rec + int64_t(row0 + i) * D, lane, s[i]);

  float q2 = 0.0f, k2 = 0.0f;
  if (tid < R) {  // this block's channels: conv steps, window shifts and gates run once, here
    float q, k, decay;
    hr.qk_decay(c, x, alpha, q, k, decay);
    conv_shift(hr.conv_q(c), x.xq, hr.tail);
    conv_shift(hr.conv_k(c), x.xk, hr.tail);
    own_q[tid] = q, own_k[tid] = k, own_v[tid] = hr.v_shifted(c, x.xv), own_decay[tid] = decay;
    q2 = q * q, k2 = k * k;
  }
  q2 = block_sum(q2);
  k2 = block_sum(k2);
  if (tid == 0) own_ss[0] = q2, own_ss[1] = k2;
  cluster.sync();  // 1: every block's channels are ready

  float tq = 0.0f, tk = 0.0f;
  for (int r = 0; r < cs; ++r) {
    const float* peer = cluster.map_shared_rank(own_ss, r);
    tq += peer[0], tk += peer[1];
  }
  const float q_mul = 1.0f / sqrtf(tq + kL2Eps) * (1.0f / sqrtf(static_cast<float>(D)));
  const float k_mul = 1.0f / sqrtf(tk + kL2Eps);
  for (int c = tid; c < D; c += kThreads) {
    const int r = c / R, i = c - r * R;
    sq[c] = cluster.map_shared_rank(own_q, r)[i] * q_mul;
    sk[c] = cluster.map_shared_rank(own_k, r)[i] * k_mul;
    sdecay[c] = cluster.map_shared_rank(own_decay, r)[i];
  }
  __syncthreads();
  float kk[CPL], qq[CPL], dd[CPL];
  load_smem<CPL>(sk, lane, kk);
  load_smem<CPL>(sq, lane, qq);
  load_smem<CPL>(sdecay, lane, dd);

  const float mine = delta_rule_rows<CPL, RW>(s, kk, qq, dd, beta, own_v + warp * RW, rec + int64_t(row0) * D, lane);
  const float oss = warp_sum(lane < RW ? mine * mine : 0.0f);
  if (lane < RW) own_o[warp * RW + lane] = mine;
  if (lane == 0) warp_ss[warp] = oss;
  __syncthreads();
  if (tid == 0) {
    float t = 0.0f;
    for (int w = 0; w < kWarps; ++w) t += warp_ss[w];
    own_ss[2] = t;
  }
  cluster.sync();  // 2: every block's output sum of squares is ready

  float total = 0.0f;
  for (int r = 0; r < cs; ++r) total += cluster.map_shared_rank(own_ss, r)[2];
  const float inv = 1.0f / sqrtf(total / D + a.norm_eps);
  if (tid < R) {
    a.out[hr.row_base + c] = own_o[tid] * inv * a.o_norm[c] * sigmoid(a.out_gate[hr.row_base + c]);
  }
  cluster.sync();  // 3: no block leaves while a peer may still read its shared memory
}

template <int CPL, int RW>
Status launch_cluster(const KdaDecodeArgs& a, cudaStream_t stream) {
  constexpr int cs = 32 * CPL / (kWarps * RW);
  static_assert(cs >= 1 && cs <= 16, "a head's blocks must fit one cluster");
  auto* kernel = kda_decode_cluster_kernel<CPL, RW>;
  if constexpr (cs > 8) {  // 16 needs the non-portable size (Hopper allows it)
    static PerDevice<cudaError_t> allowed_on;  // the attribute is per GPU (common/per_device.h)
    const cudaError_t allowed = allowed_on.get([&] { return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1); });
    PDS_RETURN_IF_ERROR(cuda_status(allowed, "kda_decode_step: cluster size 16"));
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cs, static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cs, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cuda_status(cudaLaunchKernelEx(&cfg, kernel, a), "kda_decode_step (cluster)");
}

template <int CPL, int RW>
Status launch(const KdaDecodeArgs& a, int passes, cudaStream_t stream) {
  const int splits = static_cast<int>(a.head_dim / (kWarps * RW * passes));
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch));
  kda_decode_kernel<CPL, RW><<<grid, kThreads, 0, stream>>>(a, passes);
  return last_launch_status("kda_decode_step");
}

bool aligned16(int64_t floats) { return floats % 4 == 0; }

// D = 128, K = 4, from the H200 sweeps (docs/perf.md, H = 3): the push plan while a step is
// latency-bound (4 rows a warp = 8-block clusters below ~32 heads, then 8 rows a warp =
// 4-block clusters), then the stream plan (8 warps x 4 rows, 3 stages below ~384 heads; then
// 4 warps x 4 rows, 6 stages).
// With programmatic launches (dec4 sweep) the same, except from 384 heads one item a block:
// more blocks than fit at once, so the next step's blocks fill the SMs as this step's leave.
KdaDecodeShape pick_push(int64_t head_rows, bool pdl) {
  if (head_rows < 32) return {KdaDecodePlan::kPush, 4, 4};
  if (head_rows < 96) return {KdaDecodePlan::kPush, 8, 4};
  if (head_rows < 384) return {KdaDecodePlan::kStream, 4, 8, 3};
  return {KdaDecodePlan::kStream, 4, 4, 6, pdl ? 1 : 0};
}


}  // namespace

KdaDecodeShape kda_decode_pick(int64_t batch, int64_t heads, int64_t head_dim, int64_t conv_kernel, bool pdl) {
  // D = 128, K = 4 (the K3 shape): pick_push. Otherwise the older plans, from the first
  // H200 sweep (D = 128, H = 3): cluster (8 blocks a head) below ~32 heads, then the one-block
  // plan; other head sizes were not swept: cluster.
  if (head_dim == 128 && conv_kernel == 4) return pick_push(batch * heads, pdl);
  if (head_dim != 128) return {KdaDecodePlan::kCluster, head_dim == 256 ? 8 : 2};
  const int64_t head_rows = batch * heads;
  if (head_rows < 32) return {KdaDecodePlan::kCluster, 4};
  return {KdaDecodePlan::kOneBlock, head_rows >= 512 ? 4 : 8};
}

Status kda_decode_step(const KdaDecodeArgs& a, cudaStream_t stream) {
  const int64_t D = a.head_dim;
  if (D != 32 && D != 64 && D != 128 && D != 256) return invalid_argument("kda_decode_step: head_dim must be 32, 64, 128 or 256");
  if (a.conv_kernel < 1 || a.conv_kernel > 8) return invalid_argument("kda_decode_step: conv kernel must be 1..8");
  if (a.batch < 0 || a.batch > 65535 || a.heads < 0 || a.heads > 65535) return invalid_argument("kda_decode_step: batch/heads out of range");
  if (reinterpret_cast<uintptr_t>(a.state) % 16 != 0 || !aligned16(a.slot_stride) || !aligned16(a.layer_offset))
    return invalid_argument("kda_decode_step: state, slot_stride and layer_offset must be 16-byte aligned");
  KdaDecodeShape shape{a.plan, a.rows_per_warp, a.warps, a.stages};
  if (shape.plan == KdaDecodePlan::kAuto) shape = kda_decode_pick(a.batch, a.heads, D, a.conv_kernel, a.pdl);
  if ((shape.plan == KdaDecodePlan::kPush || shape.plan == KdaDecodePlan::kStream) && (D != 128 || a.conv_kernel != 4))
    return invalid_argument("kda_decode_step: the push and stream plans need head_dim 128 and conv kernel 4");
  if (shape.plan == KdaDecodePlan::kTickets && !a.tickets) return invalid_argument("kda_decode_step: the ticket plan needs tickets");
  if (a.batch == 0 || a.heads == 0) return Status::ok();
  const int rw = shape.rows_per_warp;
  if (shape.plan == KdaDecodePlan::kPush) return kda_decode_push_step(a, shape.rows_per_warp, shape.warps, stream);
  if (shape.plan == KdaDecodePlan::kStream) {
    KdaDecodeArgs b = a;
    if (b.stream_items == 0) b.stream_items = shape.items;
    return kda_decode_stream_step(b, shape.rows_per_warp, shape.warps, shape.stages, stream);
  }
  const Status bad = invalid_argument("kda_decode_step: no kernel for this plan, head_dim and rows_per_warp");
  if (shape.plan == KdaDecodePlan::kCluster) {
    if (D == 128) {
      switch (rw) {
        case 2: return launch_cluster<4, 2>(a, stream);
        case 4: return launch_cluster<4, 4>(a, stream);
        case 8: return launch_cluster<4, 8>(a, stream);
        case 16: return launch_cluster<4, 16>(a, stream);
        default: return bad;
      }
    }
    if (D == 256) return rw == 8 ? launch_cluster<8, 8>(a, stream) : bad;
    if (rw != 2 && rw != 8) return bad;
    if (D == 32) return rw == 2 ? launch_cluster<1, 2>(a, stream) : launch_cluster<1, 8>(a, stream);
    return rw == 2 ? launch_cluster<2, 2>(a, stream) : launch_cluster<2, 8>(a, stream);
  }
  // Tickets: the head's blocks meet through an atomic; one block: the warps loop over their rows.
  const int passes = shape.plan == KdaDecodePlan::kTickets ? 1 : static_cast<int>(D / (kWarps * rw));
  KdaDecodeArgs b = a;
  if (shape.plan != KdaDecodePlan::kTickets) b.tickets = nullptr;
  if (D == 128) {
    switch (rw) {
      case 1: return launch<4, 1>(b, passes, stream);
      case 2: return launch<4, 2>(b, passes, stream);
      case 4: return launch<4, 4>(b, passes, stream);
      case 8: return launch<4, 8>(b, passes, stream);
      case 16: return launch<4, 16>(b, passes, stream);
      default: return bad;
    }
  }
  if (rw != 2 && rw != 8) return bad;
  if (D == 32) return rw == 2 ? launch<1, 2>(b, passes, stream) : launch<1, 8>(b, passes, stream);
  if (D == 64) return rw == 2 ? launch<2, 2>(b, passes, stream) : launch<2, 8>(b, passes, stream);
  return rw == 2 ? launch<8, 2>(b, passes, stream) : launch<8, 8>(b, passes, stream);
}

}  // namespace pdserve::cuda
