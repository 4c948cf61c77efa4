// The attention step of the MLA prefill on Hopper warpgroup MMA, cp.async-fed forms
// (MlaPrefillKernel::kWgmma, kWgmmaPingpong and kWgmmaSerial; the default, kWgmmaTmaPingpong, is
// in mla_prefill_wgmma_tma_sm90.cu and dispatched from here; contract: mla_prefill.h, design:
// docs/design.md "MLA prefill on tensor cores"). K3 head dims only (qk 192, v 128); other dims
// run the mma.sync kernel.
//
// CTA = one head x 128 query rows, two warpgroups of 64 rows each, one CTA an SM. Per key tile
// of 128 tokens each warpgroup computes S = Q K^T with wgmma m64n128k16 (Q and K from shared
// memory, K-major: 12 k steps over qk 192), the fp32 online softmax in registers, and
// O += P V with P from registers (the accumulator layout of S is the A fragment layout) and V
// from shared memory MN-major (the transpose bit): 8 k steps over the 128 keys.
// Q, K, V live in shared memory in 128-byte swizzled blocks of 64 columns ([rows][64] bf16,
// 16 KB a block for 128 rows), written by 16-byte cp.async from every thread (rows past the
// context zero-filled, so masked scores never meet NaNs), double-buffered: the copies of tile
// kt + 1 run under the MMAs of tile kt.
#include <cuda_bf16.h>

#include <cmath>

#include "common/cuda_check.h"
#include "mla/mla_prefill.h"
#include "mla/mla_prefill_wgmma.h"
#include "mla/mla_prefill_wgmma_tile.cuh"

namespace pdserve::cuda {

namespace {

using namespace mla_wg;

constexpr int kThreads = 256;               // two warpgroups
constexpr int kSmemBytes = kQBytes + 2 * kKBytes + 2 * kVBytes + 1024;  // + slack for 1024-byte alignment

// 128 rows x (kBlocks x 64) bf16 from src (row i at src + i * stride elements) into kBlocks
// swizzled blocks at dst; rows at or past `valid` zero-filled. Thread t copies chunk t % 8 of rows
// t / 8 + 32 q of every block: the row's swizzle (r & 7) is the same for all q, so one shared
// offset plus immediates addresses every copy (few registers stay live across the main loop).
template <int kBlocks>
__device__ __forceinline__ void load_tile(uint32_t dst, const bf16* src, int64_t stride, int valid, int tid) {
  const int c8 = tid % 8, rr = tid / 8;
  const uint32_t d0 = dst + rr * 128 + ((c8 ^ (rr & 7)) << 4);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const bool ok = rr + 32 * q < valid;
    const bf16* row = src + (ok ? int64_t(rr + 32 * q) * stride : 0) + c8 * 8;
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d0 + b * kBlock + q * 32 * 128), "l"(row + b * 64),
                   "r"(ok ? 16 : 0));
  }
}

__device__ __forceinline__ void load_q(const Work& w, uint32_t q_s, const bf16* qb, int heads) {
  load_tile<kQk / 64>(q_s, qb + (int64_t(w.row_begin + w.row0) * heads + w.h) * kQk, int64_t(heads) * kQk, w.n - w.row0, threadIdx.x);
}
__device__ __forceinline__ void load_k(const Work& w, uint32_t dst, const bf16* kb, int heads, int kt) {
  const int64_t key0 = w.kv_begin + int64_t(kt) * kKeys;
  load_tile<kQk / 64>(dst, kb + (key0 * heads + w.h) * kQk, int64_t(heads) * kQk, w.ctx - kt * kKeys, threadIdx.x);
}
__device__ __forceinline__ void load_v(const Work& w, uint32_t dst, const bf16* vb, int heads, int kt) {
  const int64_t key0 = w.kv_begin + int64_t(kt) * kKeys;
  load_tile<kVd / 64>(dst, vb + (key0 * heads + w.h) * kVd, int64_t(heads) * kVd, w.ctx - kt * kKeys, threadIdx.x);
}

// Tile data landed for every thread and visible to the async proxy; both warpgroups past the
// previous step.
// Named barrier 1 over all 256 threads: the warpgroups reach it from different places in the
// overlapped form (each passes it the same number of times).
__device__ __forceinline__ void tile_barrier() {
  mma::cp_async_wait<0>();
  wgmma::fence_proxy_async();
  asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
}

// Serial form (MlaPrefillKernel::kWgmmaSerial, kept for comparison): per key tile S, softmax,
// P V, each waited before the next; the tensor cores idle during the softmax.
__global__ void __launch_bounds__(kThreads, 1)
    attend_serial_kernel(const bf16* __restrict__ qb, const bf16* __restrict__ kb, const bf16* __restrict__ vb, int heads,
                         float scale_log2, const int32_t* __restrict__ plan, float* __restrict__ out) {
  const uint32_t q_s = smem_base(), k_s = q_s + kQBytes, v_s = k_s + 2 * kKBytes;
  const Work w = find_work(plan);
  load_q(w, q_s, qb, heads);
  load_k(w, k_s, kb, heads, 0);
  load_v(w, v_s, vb, heads, 0);
  mma::cp_async_commit();

  float o[64], sc[64];
  uint32_t p[kKeys / 16][4];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  for (int kt = 0; kt < w.num_kt; ++kt) {
    tile_barrier();  // tile kt landed; both warpgroups are done with tile kt - 1's buffers
    if (kt + 1 < w.num_kt) {
      load_k(w, k_s + ((kt + 1) & 1) * kKBytes, kb, heads, kt + 1);
      load_v(w, v_s + ((kt + 1) & 1) * kVBytes, vb, heads, kt + 1);
    }
    mma::cp_async_commit();
    if (kt >= w.wg_num_kt) continue;  // warpgroup-uniform: nothing of ours left here
    wgmma::fence();
    issue_s(sc, q_s, k_s + (kt & 1) * kKBytes, w.wg);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(sc);
    rescale(o, softmax_tile(sc, w, kt, scale_log2, m0, m1, l0, l1));
    pack_p(sc, p);
    wgmma::fence();
    issue_pv(o, p, v_s + (kt & 1) * kVBytes);
    wgmma::commit();
    wgmma::wait<0>();  // V's buffer is refilled after the next barrier; P's registers are reused
    wgmma::pin(o);
  }
  mma::cp_async_wait<0>();
  if (w.wg_rows > 0) store_out(w, o, l0, l1, heads, out);
}

// The copies of step j of the overlapped form: K_{j+1} and V_j, one commit group.
__device__ __forceinline__ void issue_loads(const Work& w, uint32_t k_s, uint32_t v_s, const bf16* kb, const bf16* vb, int heads, int j) {
  if (j + 1 < w.num_kt) load_k(w, k_s + ((j + 1) & 1) * kKBytes, kb, heads, j + 1);
  if (j < w.num_kt) load_v(w, v_s + (j & 1) * kVBytes, vb, heads, j);
  mma::cp_async_commit();
}

// Pingpong order (MlaPrefillKernel::kWgmmaPingpong): in every step warpgroup 1 issues its MMAs
// only after warpgroup 0 has issued its own (named barrier 2: 0 arrives, 1 waits), so the
// tensor cores take the two warpgroups' work one after the other and warpgroup 0's softmax runs
// under warpgroup 1's MMAs. Each warpgroup passes it once a step, whatever the step holds.
template <bool kPingpong>
__device__ __forceinline__ void issue_turn_begin(int wg) {
  if (kPingpong && wg == 1) asm volatile("bar.sync 2, %0;\n" ::"n"(kThreads) : "memory");
}
template <bool kPingpong>
__device__ __forceinline__ void issue_turn_end(int wg) {
  if (kPingpong && wg == 0) asm volatile("bar.arrive 2, %0;\n" ::"n"(kThreads) : "memory");
}

// Overlapped form (MlaPrefillKernel::kWgmma, and kWgmmaPingpong with kPingpong): step j issues
// S_j = Q K_j^T and then O += P_{j-1} V_{j-1} as two commit groups and waits for S_j first
// (wait_group 1), meaning the softmax of tile j to run under P V_{j-1}. ptxas (13.0) however
// moves the wait for P V_{j-1} up into the softmax (it interleaves the packing of P_j, which
// rewrites P_{j-1}'s registers, with the exponentials), so only the scaling and masking of S_j
// overlap it; O takes tile j's rescale at the next step, between its two MMA issues. The copies
// for step j + 1 (K_{j+1} into the K buffer S_{j-1} read, V_j into the V buffer P V_{j-2} read,
// both finished before the step's barrier) are issued at the start of step j. Step num_kt only
// runs the last P V.
template <bool kPingpong>
__global__ void __launch_bounds__(kThreads, 1)
    attend_overlap_kernel(const bf16* __restrict__ qb, const bf16* __restrict__ kb, const bf16* __restrict__ vb, int heads,
                          float scale_log2, const int32_t* __restrict__ plan, float* __restrict__ out) {
  const uint32_t q_s = smem_base(), k_s = q_s + kQBytes, v_s = k_s + 2 * kKBytes;
  const Work w = find_work(plan);
  load_q(w, q_s, qb, heads);
  load_k(w, k_s, kb, heads, 0);
  mma::cp_async_commit();

  float o[64], sc[64];
  uint32_t p[kKeys / 16][4];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  // Each warpgroup passes num_kt + 1 step barriers: S alone at step 0, S and P V at steps
  // 1 .. wg_num_kt - 1 (the steady state, a loop of its own so that no branch sits between its
  // MMAs and waits), P V alone at step wg_num_kt, copies alone after that.
  int j = 0;
  if (w.wg_num_kt > 0) {
    tile_barrier();
    issue_loads(w, k_s, v_s, kb, vb, heads, 0);
    issue_turn_begin<kPingpong>(w.wg);
    wgmma::fence();
    issue_s(sc, q_s, k_s, w.wg);
    wgmma::commit();
    issue_turn_end<kPingpong>(w.wg);
    wgmma::wait<0>();
    wgmma::pin(sc);
    float2 a_prev = softmax_tile(sc, w, 0, scale_log2, m0, m1, l0, l1);  // O's rescale owed to the last softmax
    pack_p(sc, p);
    for (j = 1; j < w.wg_num_kt; ++j) {
      tile_barrier();  // K_j and V_{j-1} landed; S_{j-1} and P V_{j-2} finished in both warpgroups
      issue_loads(w, k_s, v_s, kb, vb, heads, j);
      issue_turn_begin<kPingpong>(w.wg);
      wgmma::fence();
      issue_s(sc, q_s, k_s + (j & 1) * kKBytes, w.wg);
      wgmma::commit();
      rescale(o, a_prev);  // O is not in flight: P V_{j-2} was waited for
      wgmma::fence();
      issue_pv(o, p, v_s + ((j - 1) & 1) * kVBytes);
      wgmma::commit();
      issue_turn_end<kPingpong>(w.wg);
      wgmma::wait<1>();  // S_j done; P V_{j-1} may still run
      wgmma::pin(sc);
      a_prev = softmax_tile(sc, w, j, scale_log2, m0, m1, l0, l1);
      wgmma::wait<0>();  // P V_{j-1} done: P's registers may be rewritten
      wgmma::pin(o);
      pack_p(sc, p);
    }
    tile_barrier();
    issue_loads(w, k_s, v_s, kb, vb, heads, j);
    rescale(o, a_prev);
    issue_turn_begin<kPingpong>(w.wg);
    wgmma::fence();
    issue_pv(o, p, v_s + ((j - 1) & 1) * kVBytes);
    wgmma::commit();
    issue_turn_end<kPingpong>(w.wg);
    wgmma::wait<0>();
    wgmma::pin(o);
    ++j;
  }
  for (; j <= w.num_kt; ++j) {  // the other warpgroup still computes: keep its copies coming
    tile_barrier();
    issue_loads(w, k_s, v_s, kb, vb, heads, j);
    issue_turn_begin<kPingpong>(w.wg);
    issue_turn_end<kPingpong>(w.wg);
  }
  mma::cp_async_wait<0>();
  if (w.wg_rows > 0) store_out(w, o, l0, l1, heads, out);
}

}  // namespace

bool mla_prefill_wgmma_has_kernel(int64_t qk, int64_t v_dim) { return qk == kQk && v_dim == kVd; }

Status mla_prefill_attend_wgmma(const void* qb, const void* kb, const void* vb, int64_t heads, float scale,
                                const MlaPrefillPlan& p, const int32_t* plan, float* out, cudaStream_t stream) {
  if (p.tile_rows != kRows) return invalid_argument("mla_prefill_attend: the wgmma kernel runs tiles of 128 rows");
  if (p.kernel == MlaPrefillKernel::kWgmmaTma || p.kernel == MlaPrefillKernel::kWgmmaTmaPingpong)
    return mla_prefill_attend_wgmma_tma(qb, kb, vb, heads, scale, p, plan, out, stream);
  const auto kernel = p.kernel == MlaPrefillKernel::kWgmmaSerial     ? attend_serial_kernel
                      : p.kernel == MlaPrefillKernel::kWgmmaPingpong ? attend_overlap_kernel<true>
                                                                     : attend_overlap_kernel<false>;
  // Per call: the attribute belongs to the current device (TP ranks each own one); not a stream op.
  PDS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
                                  "mla prefill wgmma: shared memory attribute"));
  const dim3 grid(static_cast<unsigned>(p.tiles), static_cast<unsigned>(heads));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(static_cast<const bf16*>(qb), static_cast<const bf16*>(kb), static_cast<const bf16*>(vb),
                                                 static_cast<int>(heads), scale * 1.4426950408889634f, plan, out);
  return last_launch_status("mla_prefill_attend_wgmma");
}

}  // namespace pdserve::cuda
