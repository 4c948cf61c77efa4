// The MLA prefill attention on wgmma fed by a producer warp (MlaPrefillKernel::kWgmmaTma,
// kWgmmaTmaPingpong; contract: mla_prefill.h, design: docs/design.md "MLA prefill on tensor
// cores"). Same math and tile geometry as the cp.async forms (mla_prefill_wgmma_tile.cuh); what
// changes is who moves the data and how the warpgroups wait for it:
//   - CTA = 3 warpgroups: 0 and 1 compute (64 query rows each), 2 produces. One thread of the
//     producer issues bulk tensor copies (cp.async.bulk.tensor, tensor maps encoded on the host,
//     128-byte swizzle = the layout the wgmma descriptors read) for Q once and then, per key
//     tile, K into a 2-stage ring and V into another 2-stage ring (208 KB with Q).
//   - Each stage has a full mbarrier (the copy engine completes its byte count) and an empty
//     mbarrier (all 256 consumer threads arrive once their MMAs that read it are done). The K
//     slot of tile j is released as soon as S_j is done, the V slot when P V_j is, so a
//     warpgroup never waits for the other one except through the data (no CTA barrier in the
//     main loop, unlike the cp.async forms where both warpgroups meet every tile).
//   - setmaxnreg gives the producer's registers to the consumers (24 vs 240 a thread).
//   - Pingpong (kWgmmaTmaPingpong): strict turns at the tensor cores through two named
//     barriers (a warpgroup waits for its turn, issues its MMAs, hands the turn over), so one
//     warpgroup's softmax runs under the other's MMAs and nothing keeps the two in lock step
//     beyond that.
// Rows of the tile past the sequence read whatever the neighbouring sequence holds (finite
// expanded values) or zeros past the tensor's end (the copy engine's out-of-bounds fill): such
// keys are causally masked (P = 0) and such query rows are never stored.
#include <cuda.h>

#include <string>

#include "common/cuda_check.h"
#include "common/tensor_map.h"
#include "mla/mla_prefill.h"
#include "mla/mla_prefill_wgmma.h"
#include "mla/mla_prefill_wgmma_tile.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_wg;

constexpr int kConsumerThreads = 256;            // warpgroups 0 and 1
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup
constexpr int kStages = 2;                        // per ring (K and V); 3 K stages would not fit next to Q
constexpr int kBarrierBytes = 128;
constexpr int kSmemBytes = kQBytes + kStages * (kKBytes + kVBytes) + kBarrierBytes + 1024;  // + alignment slack

// Shared-memory layout from the 1024-aligned base: Q, K[2], V[2], then the mbarriers.
struct Smem {
  uint32_t q, k, v, bars;
  __device__ uint32_t k_stage(int s) const { return k + s * kKBytes; }
  __device__ uint32_t v_stage(int s) const { return v + s * kVBytes; }
  __device__ uint32_t q_full() const { return bars; }
  __device__ uint32_t k_full(int s) const { return bars + 8 * (1 + s); }
  __device__ uint32_t k_empty(int s) const { return bars + 8 * (3 + s); }
  __device__ uint32_t v_full(int s) const { return bars + 8 * (5 + s); }
  __device__ uint32_t v_empty(int s) const { return bars + 8 * (7 + s); }
};

__device__ __forceinline__ Smem smem_layout() {
  Smem m;
  m.q = smem_base();
  m.k = m.q + kQBytes;
  m.v = m.k + kStages * kKBytes;
  m.bars = m.v + kStages * kVBytes;
  return m;
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The producer's own arrival, announcing the bytes the copy engine will complete on this phase.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// One box of 128 rows x 64 columns (16 KB, 128-byte swizzled) of a [rows][heads][dim] tensor:
// columns col.., head h, rows row.. -> dst; completes its bytes on bar.
__device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap* map, int col, int h, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(h), "r"(row), "r"(bar)
      : "memory");
}

// Producer: Q once, then K_j and V_j for every key tile of the CTA, each into its ring slot
// once both consumer warpgroups released the tile that used it two tiles before.
__device__ __forceinline__ void produce(const Smem& m, const CUtensorMap* qmap, const CUtensorMap* kmap, const CUtensorMap* vmap,
                                        const Work& w) {
  mbar_expect_tx(m.q_full(), kQBytes);
#pragma unroll
  for (int b = 0; b < kQk / 64; ++b) tma_box(m.q + b * kBlock, qmap, 64 * b, w.h, w.row_begin + w.row0, m.q_full());
  for (int kt = 0; kt < w.num_kt; ++kt) {
    const int s = kt % kStages;
    const uint32_t reuse_parity = ((kt / kStages) - 1) & 1;  // the release of tile kt - kStages
    const int key0 = w.kv_begin + kt * kKeys;
    if (kt >= kStages) mbar_wait(m.k_empty(s), reuse_parity);
    mbar_expect_tx(m.k_full(s), kKBytes);
#pragma unroll
    for (int b = 0; b < kQk / 64; ++b) tma_box(m.k_stage(s) + b * kBlock, kmap, 64 * b, w.h, key0, m.k_full(s));
    if (kt >= kStages) mbar_wait(m.v_empty(s), reuse_parity);
    mbar_expect_tx(m.v_full(s), kVBytes);
#pragma unroll
    for (int b = 0; b < kVd / 64; ++b) tma_box(m.v_stage(s) + b * kBlock, vmap, 64 * b, w.h, key0, m.v_full(s));
  }
}

__device__ __forceinline__ uint32_t fill_parity(int kt) { return (kt / kStages) & 1; }
__device__ __forceinline__ void wait_k(const Smem& m, int kt) { mbar_wait(m.k_full(kt % kStages), fill_parity(kt)); }
__device__ __forceinline__ void wait_v(const Smem& m, int kt) { mbar_wait(m.v_full(kt % kStages), fill_parity(kt)); }
__device__ __forceinline__ void release_k(const Smem& m, int kt) { mbar_arrive(m.k_empty(kt % kStages)); }
__device__ __forceinline__ void release_v(const Smem& m, int kt) { mbar_arrive(m.v_empty(kt % kStages)); }

// Pingpong turns: warpgroup g waits on barrier 2 + g and hands the turn to the other one's
// barrier; warpgroup 1 gives warpgroup 0 the first turn and warpgroup 0 takes the last hand-over
// at the end, so both barriers end balanced. Each warpgroup takes num_kt + 1 turns.
template <bool kPingpong>
__device__ __forceinline__ void turn_begin(int wg) {
  if (kPingpong) asm volatile("bar.sync %0, %1;\n" ::"r"(2 + wg), "n"(kConsumerThreads) : "memory");
}
template <bool kPingpong>
__device__ __forceinline__ void turn_end(int wg) {
  if (kPingpong) asm volatile("bar.arrive %0, %1;\n" ::"r"(3 - wg), "n"(kConsumerThreads) : "memory");
}

// Steady-state step j: S_j with P V_{j-1}, the softmax of S_j meant to run under P V_{j-1}, then
// P_j packed into P's registers once P V_{j-1} is done. ptxas (13.0) places the wait for
// P V_{j-1} right after the one for S_j, above the softmax, whatever the source order (docs/perf.md
// "TMA producer warp" lists what was tried), so within a warpgroup the softmax does not overlap
// its own P V; the pingpong form overlaps it with the other warpgroup's MMAs instead.
template <bool kPingpong>
__device__ __forceinline__ void steady_step(const Smem& m, const Work& w, int j, float scale_log2, float (&o)[64], float (&sc)[64],
                                            uint32_t (&p)[kKeys / 16][4], float2& a_prev, float& m0, float& m1, float& l0, float& l1) {
  wait_k(m, j);
  wait_v(m, j - 1);
  turn_begin<kPingpong>(w.wg);
  wgmma::fence();
  issue_s<true>(sc, m.q, m.k_stage(j % kStages), w.wg);
  wgmma::commit();
  rescale(o, a_prev);  // O is not in flight: P V_{j-2} was waited for
  wgmma::fence();
  issue_pv(o, p, m.v_stage((j - 1) % kStages));
  wgmma::commit();
  turn_end<kPingpong>(w.wg);
  wgmma::wait<1>();  // S_j done; P V_{j-1} may still run
  wgmma::pin(sc);
  release_k(m, j);
  a_prev = softmax_tile(sc, w, j, scale_log2, m0, m1, l0, l1);
  wgmma::wait<0>();  // P V_{j-1} done: P's registers may be rewritten
  wgmma::pin(o);
  release_v(m, j - 1);
  pack_p(sc, p);
}

// Consumer warpgroup: step j issues S_j and then P V_{j-1} (two commit groups) and runs the
// softmax of S_j under P V_{j-1} (as in the cp.async overlapped form); K_j is released once S_j
// is done, V_{j-1} once P V_{j-1} is. Tiles past the warpgroup's last row's reach are still
// waited for and released (the other warpgroup uses them; an empty barrier counts both).
template <bool kPingpong>
__device__ __forceinline__ void consume(const Smem& m, const Work& w, int heads, float scale_log2, float* __restrict__ out) {
  if (kPingpong && w.wg == 1) asm volatile("bar.arrive 2, %0;\n" ::"n"(kConsumerThreads) : "memory");
  float o[64], sc[64];
  uint32_t p[kKeys / 16][4];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  int j = 0;
  if (w.wg_num_kt > 0) {
    mbar_wait(m.q_full(), 0);
    wait_k(m, 0);
    turn_begin<kPingpong>(w.wg);
    wgmma::fence();
    issue_s<true>(sc, m.q, m.k_stage(0), w.wg);
    wgmma::commit();
    turn_end<kPingpong>(w.wg);
    wgmma::wait<0>();
    wgmma::pin(sc);
    release_k(m, 0);
    float2 a_prev = softmax_tile(sc, w, 0, scale_log2, m0, m1, l0, l1);  // O's rescale owed to the last softmax
    pack_p(sc, p);
    for (j = 1; j < w.wg_num_kt; ++j) steady_step<kPingpong>(m, w, j, scale_log2, o, sc, p, a_prev, m0, m1, l0, l1);
    wait_v(m, j - 1);
    rescale(o, a_prev);
    turn_begin<kPingpong>(w.wg);
    wgmma::fence();
    issue_pv(o, p, m.v_stage((j - 1) % kStages));
    wgmma::commit();
    turn_end<kPingpong>(w.wg);
    wgmma::wait<0>();
    wgmma::pin(o);
    release_v(m, j - 1);
    ++j;
  } else {  // no rows here: step 0's turn only
    turn_begin<kPingpong>(w.wg);
    turn_end<kPingpong>(w.wg);
    j = 1;
  }
  for (; j <= w.num_kt; ++j) {  // the other warpgroup still computes: pass its tiles on and its turns
    wait_k(m, j - 1);
    release_k(m, j - 1);
    wait_v(m, j - 1);
    release_v(m, j - 1);
    turn_begin<kPingpong>(w.wg);
    turn_end<kPingpong>(w.wg);
  }
  if (kPingpong && w.wg == 0) asm volatile("bar.sync 2, %0;\n" ::"n"(kConsumerThreads) : "memory");  // the last hand-over
  if (w.wg_rows > 0) store_out(w, o, l0, l1, heads, out);
}

template <bool kPingpong>
__global__ void __launch_bounds__(kThreads, 1)
    attend_tma_kernel(const __grid_constant__ CUtensorMap qmap, const __grid_constant__ CUtensorMap kmap,
                      const __grid_constant__ CUtensorMap vmap, int heads, float scale_log2, const int32_t* __restrict__ plan,
                      float* __restrict__ out) {
  const Smem m = smem_layout();
  if (threadIdx.x == kConsumerThreads) {
    mbar_init(m.q_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(m.k_full(s), 1);
      mbar_init(m.v_full(s), 1);
      mbar_init(m.k_empty(s), kConsumerThreads);
      mbar_init(m.v_empty(s), kConsumerThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
  }
  __syncthreads();
  if (threadIdx.x >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == kConsumerThreads) produce(m, &qmap, &kmap, &vmap, find_work(plan));
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    consume<kPingpong>(m, find_work(plan), heads, scale_log2, out);
  }
}

// [rows][heads][dim] bf16, boxes of 64 columns x 1 head x 128 rows (128-byte swizzle, zero fill).
Status encode_map(CUtensorMap* map, const void* base, int64_t rows, int64_t heads, int64_t dim) {
  const uint64_t extent[3] = {static_cast<uint64_t>(dim), static_cast<uint64_t>(heads), static_cast<uint64_t>(rows)};
  const uint64_t stride[2] = {static_cast<uint64_t>(dim * 2), static_cast<uint64_t>(heads * dim * 2)};  // bytes, dims 1..2
  const uint32_t box[3] = {64, 1, static_cast<uint32_t>(kKeys)};
  return encode_bf16_tensor_map(map, base, 3, extent, stride, box, "mla prefill tma");
}

}  // namespace

Status mla_prefill_attend_wgmma_tma(const void* qb, const void* kb, const void* vb, int64_t heads, float scale,
                                    const MlaPrefillPlan& p, const int32_t* plan, float* out, cudaStream_t stream) {
  static_assert(kRows == kKeys, "one tensor-map box shape serves Q, K and V");
  CUtensorMap qmap, kmap, vmap;
  PDS_RETURN_IF_ERROR(encode_map(&qmap, qb, p.rows, heads, kQk));
  PDS_RETURN_IF_ERROR(encode_map(&kmap, kb, p.ctx_total, heads, kQk));
  PDS_RETURN_IF_ERROR(encode_map(&vmap, vb, p.ctx_total, heads, kVd));
  const auto kernel = p.kernel == MlaPrefillKernel::kWgmmaTmaPingpong ? attend_tma_kernel<true> : attend_tma_kernel<false>;
  PDS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
                                  "mla prefill tma: shared memory attribute"));
  const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(heads));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(qmap, kmap, vmap, static_cast<int>(heads), scale * 1.4426950408889634f, plan, out);
  return last_launch_status("mla_prefill_attend_wgmma_tma");
}

}  // namespace pdserve::cuda
