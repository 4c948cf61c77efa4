// The fused KDA decode step, stream plan (contract: kda.h): for large batches, where the step
// is bound by the recurrent state's bytes. One block owns whole heads ((row, head) items, a
// contiguous run of them per block, balanced over the blocks that fit on the device at once)
// and walks them as one flat sequence of passes; each warp keeps its next rows' state in
// flight with cp.async into a ring of `NS` shared-memory stages, across head boundaries, so
// the preamble of a head (conv steps, gates, norms, the inputs of the next head already in
// registers) overlaps the state reads of the rows after it. Each lane reads back only the
// 16-byte chunks it copied itself, so the ring needs no barrier; two block barriers per head
// hand q, k, decays, v and the outputs over in shared memory.
#include "common/cuda_check.h"
#include "common/per_device.h"
#include "common/pdl_bulk.cuh"
#include "common/reduce.cuh"
#include "kda/kda.h"
#include "kda/kda_decode_common.cuh"
#include "kda/kda_decode_push.h"

namespace pdserve::cuda {

namespace {

using namespace kda_decode;
constexpr int kD = 128, kConv = 4, kTail = kConv - 1;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One item's slot-dependent and slot-independent inputs for channel c = threadIdx.x (< D),
// loaded one item ahead so their latency hides behind the current item's passes.
struct ItemInputs {
  float xq, xk, xv, fx, gate, alog, beta_logit;
  float4 wq, wk, wv;
  float q0, q1, q2, k0, k1, k2, v0, v1, v2;
};

struct Item {
  int64_t b, h, row_base;  // row, head, first input index
  int32_t slot;
  float* layer;  // the slot's block of this layer; null for a padding row
  __device__ float* conv(int which, int64_t P, int c) const { return layer + (which * P + h * kD + c) * kTail; }
  __device__ float* rec(int64_t P) const { return layer + 3 * P * kTail + h * kD * kD; }
};

__device__ __forceinline__ Item item_at(const KdaDecodeArgs& a, int64_t it, int32_t slot) {
  Item r;
  r.b = it / a.heads, r.h = it - r.b * a.heads, r.row_base = r.b * a.heads * kD + r.h * kD, r.slot = slot;
  r.layer = slot < 0 ? nullptr : a.state + int64_t(slot) * a.slot_stride + a.layer_offset;
  return r;
}

__device__ __forceinline__ void load_inputs(const KdaDecodeArgs& a, const Item& it, int c, ItemInputs& in) {
  const int64_t P = a.heads * kD, hd = it.h * kD;
  in.alog = __ldg(a.a_log + it.h), in.beta_logit = __ldg(a.beta_logit + it.b * a.heads + it.h);
  if (c >= kD) return;
  in.xq = __ldg(a.q_raw + it.row_base + c), in.xk = __ldg(a.k_raw + it.row_base + c), in.xv = __ldg(a.v_raw + it.row_base + c);
  in.fx = __ldg(a.f + it.row_base + c) + __ldg(a.dt_bias + hd + c), in.gate = __ldg(a.out_gate + it.row_base + c);
  in.wq = __ldg(reinterpret_cast<const float4*>(a.conv_q) + hd + c);
  in.wk = __ldg(reinterpret_cast<const float4*>(a.conv_k) + hd + c);
  in.wv = __ldg(reinterpret_cast<const float4*>(a.conv_v) + hd + c);
  if (!it.layer) return;
  const float *cq = it.conv(0, P, c), *ck = it.conv(1, P, c), *cv = it.conv(2, P, c);
  in.q0 = cq[0], in.q1 = cq[1], in.q2 = cq[2], in.k0 = ck[0], in.k1 = ck[1], in.k2 = ck[2], in.v0 = cv[0], in.v1 = cv[1], in.v2 = cv[2];
}

// W warps of RW rows a pass, NS stages of W*RW rows each; `per_block` items a block.
template <int RW, int W, int NS>
__global__ void __launch_bounds__(32 * W) kda_decode_stream_kernel(const __grid_constant__ KdaDecodeArgs a, int per_block) {
  constexpr int ROWS = W * RW, PASSES = kD / ROWS;
  static_assert(PASSES >= 1 && NS >= 2 && NS - 1 <= PASSES, "the ring runs at most one item ahead");
  extern __shared__ float4 ring[];  // [NS][W][RW][32 lanes]
  __shared__ __align__(16) float sq[kD], sk[kD], sdecay[kD], sv[kD], so[kD];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t P = a.heads * kD, items = a.batch * a.heads;
  int64_t item = int64_t(blockIdx.x) * per_block;
  const int64_t end = min(items, item + per_block);
  if (item >= end) return;

  // Task (rows of one pass of one item) -> this warp's RW rows into stage `st`; one commit group
  // per task, empty for padding rows and past the block's last item, so the counts stay uniform.
  auto issue = [&](const float* rec, int pass, int st) {
    if (rec) {
      const int row0 = pass * ROWS + warp * RW;
#pragma unroll
      for (int i = 0; i < RW; ++i) cp_async16(&ring[((st * W + warp) * RW + i) * 32 + lane], rec + int64_t(row0 + i) * kD + 4 * lane);
    }
    cp_async_commit();
  };

  Item cur = item_at(a, item, __ldg(a.slots + item / a.heads));
  float* rec = cur.layer ? cur.rec(P) : nullptr;
#pragma unroll
  for (int t = 0; t < NS - 1; ++t) issue(rec, t, t);
  // With a.pdl the step may start while the kernel before it drains: the slots and the state
  // above are not that kernel's outputs (kda.h), the projections below may be.
  pdl_bulk::pdl_wait();
  pdl_bulk::pdl_trigger();
  ItemInputs in;
  load_inputs(a, cur, tid, in);
  const float onorm = tid < kD ? __ldg(a.o_norm + tid) : 0.0f;
  int32_t next_slot = item + 1 < end ? __ldg(a.slots + (item + 1) / a.heads) : -1;
  int st_read = 0, st_write = NS - 1;

  for (;;) {
    // Preamble of this item: channel tid's q, k, v and decay, its conv windows shifted.
    const bool pad = !cur.layer;
    if (!pad && tid < kD) {
      const float q = conv4_silu(in.wq, in.q0, in.q1, in.q2, in.xq), k = conv4_silu(in.wk, in.k0, in.k1, in.k2, in.xk);
      const float v = conv4_silu(in.wv, in.v0, in.v1, in.v2, in.xv);
      sq[tid] = q, sk[tid] = k, sv[tid] = v, sdecay[tid] = gate_decay(a, expf(in.alog), in.fx);
      float *cq = cur.conv(0, P, tid), *ck = cur.conv(1, P, tid), *cv = cur.conv(2, P, tid);
      cq[0] = in.q1, cq[1] = in.q2, cq[2] = in.xq;
      ck[0] = in.k1, ck[1] = in.k2, ck[2] = in.xk;
      cv[0] = in.v1, cv[1] = in.v2, cv[2] = in.xv;
    }
    const float gate = in.gate, beta = sigmoid(in.beta_logit);
    // The next item's inputs (and the slot of the one after) go in flight now.
    const bool has_next = item + 1 < end;
    Item nxt = item_at(a, has_next ? item + 1 : item, has_next ? next_slot : -1);
    float* next_rec = has_next && nxt.layer ? nxt.rec(P) : nullptr;
    if (has_next) {
      load_inputs(a, nxt, tid, in);
      next_slot = item + 2 < end ? __ldg(a.slots + (item + 2) / a.heads) : -1;
    }
    __syncthreads();  // A: the item's q, k, decays and v are in shared memory

    float4 kn = {}, qn = {}, dd = {};
    if (!pad) {
      const float4 kk = reinterpret_cast<const float4*>(sk)[lane], qr = reinterpret_cast<const float4*>(sq)[lane];
      dd = reinterpret_cast<const float4*>(sdecay)[lane];
      const float ssq = warp_sum(qr.x * qr.x + qr.y * qr.y + qr.z * qr.z + qr.w * qr.w);
      const float ssk = warp_sum(kk.x * kk.x + kk.y * kk.y + kk.z * kk.z + kk.w * kk.w);
      const float q_mul = 1.0f / sqrtf(ssq + kL2Eps) * (1.0f / sqrtf(static_cast<float>(kD))), k_mul = 1.0f / sqrtf(ssk + kL2Eps);
      kn = make_float4(kk.x * k_mul, kk.y * k_mul, kk.z * k_mul, kk.w * k_mul);
      qn = make_float4(qr.x * q_mul, qr.y * q_mul, qr.z * q_mul, qr.w * q_mul);
    }
    const float kk[4] = {kn.x, kn.y, kn.z, kn.w}, qq[4] = {qn.x, qn.y, qn.z, qn.w}, de[4] = {dd.x, dd.y, dd.z, dd.w};

#pragma unroll 1
    for (int p = 0; p < PASSES; ++p) {
      cp_async_wait<NS - 2>();  // this pass's rows have landed (this lane's chunks)
      const int ahead = p + NS - 1;
      issue(ahead < PASSES ? rec : next_rec, ahead < PASSES ? ahead : ahead - PASSES, st_write);
      st_write = st_write + 1 == NS ? 0 : st_write + 1;
      if (!pad) {
        float s[RW][4];
#pragma unroll
        for (int i = 0; i < RW; ++i) {
          const float4 t = ring[((st_read * W + warp) * RW + i) * 32 + lane];
          s[i][0] = t.x, s[i][1] = t.y, s[i][2] = t.z, s[i][3] = t.w;
        }
        const int row0 = p * ROWS + warp * RW;
        const float mine = delta_rule_rows<4, RW>(s, kk, qq, de, beta, sv + row0, rec + int64_t(row0) * kD, lane);
        if (lane < RW) so[row0 + lane] = mine;
      }
      st_read = st_read + 1 == NS ? 0 : st_read + 1;
    }
    __syncthreads();  // B: the item's outputs are in shared memory

    if (tid < kD) {
      float o = 0.0f;
      if (!pad) {
        const float4 oo = reinterpret_cast<const float4*>(so)[lane];
        const float ss = warp_sum(oo.x * oo.x + oo.y * oo.y + oo.z * oo.z + oo.w * oo.w);
        o = so[tid] * (1.0f / sqrtf(ss / kD + a.norm_eps)) * onorm * sigmoid(gate);
      }
      a.out[cur.row_base + tid] = o;
    }
    if (!has_next) break;
    ++item, cur = nxt, rec = next_rec;
  }
  cp_async_wait<0>();
}

template <int RW, int W, int NS>
Status launch_stream(const KdaDecodeArgs& a, int per_block, cudaStream_t stream) {
  auto* kernel = kda_decode_stream_kernel<RW, W, NS>;
  constexpr int threads = 32 * W;
  constexpr size_t smem = size_t(NS) * W * RW * 32 * sizeof(float4);
  // Once per shape and GPU: the dynamic shared memory limit, and how many blocks fit on the device.
  static PerDevice<int> resident_on;
  const int resident = resident_on.get([&] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) return 0;
    int per_sm = 0, device = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess || cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return 0;
    return per_sm * sms;
  });
  if (resident <= 0) return internal_error("kda_decode_step (stream): no block of this shape fits");
  const int64_t items = a.batch * a.heads;
  // Fewest items a block such that every block is resident at once; then as few blocks as that needs.
  const int64_t k = per_block > 0 ? per_block : (items + resident - 1) / resident;
  const int64_t grid = (items + k - 1) / k;
  const cudaError_t e = pdl_bulk::launch_pdl(a.pdl, kernel, dim3(static_cast<unsigned>(grid)), dim3(threads), smem, stream, a, static_cast<int>(k));
  if (e != cudaSuccess) return cuda_status(e, "kda_decode_step (stream)");
  return last_launch_status("kda_decode_step (stream)");
}

}  // namespace

Status kda_decode_stream_step(const KdaDecodeArgs& a, int rows_per_warp, int warps, int stages, cudaStream_t stream) {
  if (a.head_dim != kD || a.conv_kernel != kConv) return invalid_argument("kda_decode_step: the stream plan needs head_dim 128 and conv kernel 4");
  const Status bad = invalid_argument("kda_decode_step: no stream kernel for these rows_per_warp, warps and stages");
  const int per_block = a.stream_items;
  if (warps == 4 && rows_per_warp == 4) {
    if (stages == 0 || stages == 4) return launch_stream<4, 4, 4>(a, per_block, stream);
    if (stages == 6) return launch_stream<4, 4, 6>(a, per_block, stream);
    return bad;
  }
  if (warps == 4 && rows_per_warp == 2) return stages == 0 || stages == 6 ? launch_stream<2, 4, 6>(a, per_block, stream) : bad;
  if (warps == 4 && rows_per_warp == 8) return stages == 0 || stages == 3 ? launch_stream<8, 4, 3>(a, per_block, stream) : bad;
  if (warps == 8 && rows_per_warp == 4) return stages == 0 || stages == 3 ? launch_stream<4, 8, 3>(a, per_block, stream) : bad;
  return bad;
}

}  // namespace pdserve::cuda
