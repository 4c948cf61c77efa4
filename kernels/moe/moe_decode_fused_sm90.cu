// kFused (moe_decode.h): the whole expert MLP in one launch, weights through a TMA ring.
//
// Why: at decode sizes the two-launch kernels spend much of their time starting up (two
// launches, two pipeline ramps, the down weights requested only after the gate/up launch
// drained), and their register double buffer keeps at most two units of weights in flight
// per SM through the load/store unit. Here:
//  - one producer warp per CTA claims units from a global queue (all gate/up units first,
//    then all down units) and has the TMA unit copy each unit's packed tiles and scales
//    (2 or 4 contiguous runs: the layout keeps a unit's tiles adjacent) into a shared-
//    memory ring (kStages units deep, an mbarrier pair per slot); nothing else of the CTA
//    issues weight loads, so the 16 MMA warps hold no weights in registers;
//  - the MMA warps run the weights-on-A step of moe_decode_sm90.cu on each slot and hand
//    it back; a gate/up unit, once its activations are written, bumps its expert's counter;
//  - a down unit's weights are copied as soon as it is claimed (they do not depend on the
//    activations), and only the staging of its activation rows waits for the expert's
//    counter to reach its gate/up unit count: the down weights stream in while the last
//    gate/up units finish, with no second launch.
// No deadlock whatever the residency: a down unit is claimed only after every gate/up
// unit was claimed, each by a running CTA that finishes its gate/up units (in claim
// order) before it waits on anything, and other grids (a concurrent call on another
// stream) only delay CTAs that have not claimed anything yet. The queue and counters live
// in the caller's workspace (moe_decode.h, MoeDecodeWorkspace), which the last CTA to
// finish zeroes, so the next launch or graph replay starts from zero and concurrent calls
// with separate workspaces never see each other's counters.
#include <cstdint>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"

namespace pdserve::cuda::moe_decode_detail {

namespace {

constexpr int kStages = 2;  // ring slots, each one unit (4 tiles x all chunks + scales)
static_assert(kStages == 2, "the producer's last reclaim assumes one slot still out");
// MMA warps per CTA: kWaWarps (16), or kWideWarps (kFusedSplit24Warps: 6 a scheduler
// rather than 4, for a kernel that waits on latency; ptxas then caps it at 72 registers).
constexpr int kWideWarps = 24;
template <int kWarps>
constexpr int threads_all() { return kWarps * 32 + 32; }  // + the producer warp

// The workspace (moe_decode_workspace_bytes): this header, then one word per local expert
// (gate/up units finished); zero before a launch, zero after.
struct Sched {
  unsigned next;  // the unit queue
  unsigned done;  // CTAs finished
};
static_assert(sizeof(Sched) == 2 * sizeof(uint32_t), "moe_decode_workspace_bytes counts 2 + experts words");
__device__ __forceinline__ unsigned* expert_counters(Sched* s) { return reinterpret_cast<unsigned*>(s + 1); }

// The mbarrier and bulk-copy helpers are the shared ones (common/pdl_bulk.cuh).
using pdl_bulk::bulk_copy;
using pdl_bulk::mbar_arrive;
using pdl_bulk::mbar_arrive_expect_tx;
using pdl_bulk::mbar_init;
using pdl_bulk::mbar_wait;
using pdl_bulk::smem_u32;

template <int kWarps>
__device__ __forceinline__ void mma_warps_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kWarps * 32) : "memory"); }

__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned target) {
  for (;;) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    if (v >= target) break;
    __nanosleep(100);
  }
  __threadfence();
}

struct Shape {
  uint32_t gate_tiles, gate_chunks, gate_per_expert;  // w1/w3: inter / 8 tiles, dim / 128 chunks, 2 tiles a unit
  uint32_t down_tiles, down_chunks, down_per_expert;  // w2: dim / 8 tiles, inter / 128 chunks, 4 tiles a unit
  uint32_t cmax;                                      // chunks a slot is sized for
};

// The split schedule's step (kFusedSplit): one A operand (tiles 2p, 2p+1) of one 128-input
// chunk, with the lane's word quads q0 (tile 2p), q1 (tile 2p+1) and scale words s0, s1;
// wa_chunk's step for a single p, with three savings a word (measured in the SASS: 21.5
// instructions a word before them):
//  - the narrow-scale multiplier 2^(s-1) of byte i comes from one add a scale word (bytes
//    <= 128, so + 126 never carries into the next byte) and a byte permute + shift, where
//    dequant_word spends about four instructions;
//  - the token rows load unguarded: a row past the pass's end holds stale (or never written)
//    shared memory, but B's column g only reaches D's column g, token g, which the
//    reduction never writes out, so there is no need to zero the operand first;
//  - the two k-halves of a word pair accumulate into separate registers (accA, accB), so a
//    warp with two items in flight has four independent MMA chains, not two.
template <bool kWide>
__device__ __forceinline__ void wa_chunk_pair(const uint4& q0, const uint4& q1, uint32_t s0, uint32_t s1, const uint16_t* xg,
                                              float (&accA)[4], float (&accB)[4]) {
  const uint32_t e0 = s0 + 0x7E7E7E7Eu, e1 = s1 + 0x7E7E7E7Eu;
  // bf16 bits of bytes 0, 2 (ev) and 1, 3 (od) in the (low, high) halves: (byte << 7) each.
  const uint32_t ev0 = (e0 << 7) & 0x7F807F80u, od0 = (e0 >> 1) & 0x7F807F80u;
  const uint32_t ev1 = (e1 << 7) & 0x7F807F80u, od1 = (e1 >> 1) & 0x7F807F80u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = *reinterpret_cast<const uint4*>(xg + 32 * i);
    uint32_t lo[4], hi[4];
    if constexpr (kWide) {
      dequant_word<true>(word_of(q0, i), (s0 >> (8 * i)) & 0xffu, lo);
      dequant_word<true>(word_of(q1, i), (s1 >> (8 * i)) & 0xffu, hi);
    } else {
      // Byte i's multiplier is half i / 2 of (i even ? ev : od); the multiply broadcasts it.
      const uint32_t c0 = (i & 1) ? od0 : ev0, c1 = (i & 1) ? od1 : ev1;
      dequant_bits(word_of(q0, i), lo);
      dequant_bits(word_of(q1, i), hi);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        lo[j] = i < 2 ? bf16x2_mul_low(lo[j], c0) : bf16x2_mul_high(lo[j], c0);
        hi[j] = i < 2 ? bf16x2_mul_low(hi[j], c1) : bf16x2_mul_high(hi[j], c1);
      }
    }
    const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
    mma_bf16(accA, a0, v.x, v.y);
    mma_bf16(accB, a1, v.z, v.w);
  }
}

// One unit on the MMA warps: 4 tiles x `chunks` from the slot (tile k chunk c at packed
// (k * chunks + c) * 512, scales (k * chunks + c) * 32 after 4 * cmax * 512 bytes), every
// 8-token pass of the expert's rows; gated: tiles 0, 1 gate rows n, n+1, tiles 2, 3 up.
// kSplit: the warps split the unit by (A operand p, chunk) instead of by chunk: warp w takes
// operand p = w & 1 over chunks w / 2, w / 2 + 8, ...; the down projection's 24 chunks then
// give every warp 3 items (by chunk: 8 warps 2 chunks, 8 warps 1, so a pass waited on the
// slow half), the gate/up's 28 give 4 or 3 (as by chunk: 2 or 1).
// The reduction buffer: two halves (alternate passes) x warps x the tiles a warp writes
// (4; kSplit: the 2 of its operand) x tokens x rows.
template <int kWarps, bool kSplit>
using RedBuf = float[2][kWarps][kSplit ? 2 : 4][kWaTokens][8];

template <bool kGated, bool kWide, bool kSplit, int kWarps>
__device__ __forceinline__ void run_unit(const uint8_t* slot, uint32_t cmax, uint32_t chunks, int e, uint32_t n, int begin, int end,
                                         const float* x, uint32_t cols, float* y, uint32_t y_cols, const MoeAct& fn, uint16_t* x_s,
                                         RedBuf<kWarps, kSplit>& s_red2, int& staged_key, int& buf, uint32_t gate_per_expert,
                                         const unsigned* expert_done) {
  constexpr int kMmaThreads = kWarps * 32;
  // Gate/up units are published by the producer warp once the slot comes back (see there).
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const uint4* packed = reinterpret_cast<const uint4*>(slot);
  const uint32_t* scales = reinterpret_cast<const uint32_t*>(slot + size_t(4) * cmax * 512);
  const uint32_t stride = cols + kStagedPad;
  for (int r0 = begin; r0 < end; r0 += kWaTokens) {
    const int nrows = min(kWaTokens, end - r0);
    const int key = kGated ? r0 : r0 | (1 << 30);  // rows of x_sorted or of act
    if (staged_key != key) {  // uniform; the last pass's barrier ended all x_s reads
      if constexpr (!kGated) {  // the activations of expert e: every gate/up unit of it done
        if (tid == 0) wait_at_least(&expert_done[e], gate_per_expert);
        mma_warps_sync<kWarps>();
      }
      stage_rows<true>(x, r0, nrows, cols, stride, x_s, tid, kMmaThreads);
      staged_key = key;
      mma_warps_sync<kWarps>();
    }
    const uint16_t* xg = x_s + g * stride + 8 * t;
    const bool tok_ok = g < nrows;
    auto& red = s_red2[buf];
    buf ^= 1;  // the next pass writes the other half: one barrier a pass
    if constexpr (kSplit) {
      constexpr uint32_t kLanes = kWarps / 2;  // warps a operand
      const uint32_t p = warp & 1, k0 = 2 * p;  // tiles k0, k0 + 1
      float acc[4][4] = {};  // items c, c2 x k-halves: four independent MMA chains
      uint32_t c = warp >> 1;
      // Pointers at chunk c, stepped by 2 * kLanes chunks an iteration: item c2 = c + kLanes
      // is then a constant offset from them, and the loop's address math is four adds
      // rather than a multiply-add per load (about 0.6 SASS instructions a word).
      const uint4* p0 = packed + (k0 * chunks + c) * 32 + lane;
      const uint4* p1 = p0 + chunks * 32;
      const uint32_t* s0 = scales + (k0 * chunks + c) * 8 + g;
      const uint32_t* s1 = s0 + chunks * 8;
      const uint16_t* xc = xg + c * 128;
      for (; c + kLanes < chunks; c += 2 * kLanes) {
        wa_chunk_pair<kWide>(p0[0], p1[0], s0[0], s1[0], xc, acc[0], acc[1]);
        wa_chunk_pair<kWide>(p0[kLanes * 32], p1[kLanes * 32], s0[kLanes * 8], s1[kLanes * 8], xc + kLanes * 128, acc[2], acc[3]);
        p0 += 2 * kLanes * 32, p1 += 2 * kLanes * 32, s0 += 2 * kLanes * 8, s1 += 2 * kLanes * 8, xc += 2 * kLanes * 128;
      }
      if (c < chunks) wa_chunk_pair<kWide>(p0[0], p1[0], s0[0], s1[0], xc, acc[0], acc[1]);
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[0][j] += acc[1][j] + (acc[2][j] + acc[3][j]);
      auto& mine = red[warp];  // [0]: tile k0, [1]: tile k1
      mine[0][2 * t][g] = acc[0][0];
      mine[0][2 * t + 1][g] = acc[0][1];
      mine[1][2 * t][g] = acc[0][2];
      mine[1][2 * t + 1][g] = acc[0][3];
    } else {
      // Two chunks a step into separate accumulators: two independent MMA chains per operand.
      float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      float acc2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      auto load = [&](uint32_t c, uint4(&q)[4], uint32_t(&s)[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          q[k] = packed[(k * chunks + c) * 32 + lane];
          s[k] = scales[(k * chunks + c) * 8 + g];
        }
      };
      uint32_t c = warp;
      for (; c + kWaWarps < chunks; c += 2 * kWaWarps) {
        uint4 q[4], q2[4];
        uint32_t s[4], s2[4];
        load(c, q, s);
        load(c + kWaWarps, q2, s2);
        wa_chunk<kWide>(q, s, xg + c * 128, tok_ok, acc);
        wa_chunk<kWide>(q2, s2, xg + (c + kWaWarps) * 128, tok_ok, acc2);
      }
      if (c < chunks) {
        uint4 q[4];
        uint32_t s[4];
        load(c, q, s);
        wa_chunk<kWide>(q, s, xg + c * 128, tok_ok, acc);
      }
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[p][j] += acc2[p][j];
      wa_store_partials(acc, red[warp], g, t);
    }
    mma_warps_sync<kWarps>();
    const int k = tid / (kWaTokens * 8), tok = (tid / 8) % kWaTokens, rr = tid % 8;
    if (k < (kGated ? 2 : 4) && tok < nrows) {
      float va = 0.0f, vb = 0.0f;
      // kSplit: only the warps of tile k's operand (w & 1 == k / 2) wrote it, as its tile
      // k & 1; the up tiles k + 2 are operand 1.
      constexpr int kStep = kSplit ? 2 : 1;
#pragma unroll
      for (int w = kSplit ? (k >> 1) : 0; w < kWarps; w += kStep) va += red[w][kSplit ? (k & 1) : k][tok][rr];
      if constexpr (kGated) {
#pragma unroll
        for (int w = kSplit ? 1 : 0; w < kWarps; w += kStep) vb += red[w][kSplit ? (k & 1) : k + 2][tok][rr];
      }
      y[int64_t(r0 + tok) * y_cols + int64_t(n + k) * 8 + rr] = kGated ? fn(va, vb) : va;
    }
  }
}

// kStagger: the second slot's copy waits until the first slot has landed (the launch's first
// wave is then one slot an SM, so the MMA warps start about half a wave earlier).
template <bool kWide, bool kSplit, int kWarps, bool kStagger = false>
__global__ void __launch_bounds__(threads_all<kWarps>(), 1)
    decode_fused(Mxfp4Decode w1, Mxfp4Decode w3, Mxfp4Decode w2, Shape sh, const int32_t* __restrict__ offsets, int experts,
                 const float* __restrict__ x, float* act, float* __restrict__ out, MoeAct fn, Sched* sched) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ int s_unit[kStages];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ RedBuf<kWarps, kSplit> s_red;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t xcols = sh.cmax * 128;
  uint16_t* x_s = reinterpret_cast<uint16_t*>(smem);
  uint8_t* ring = smem + size_t(kWaTokens) * (xcols + kStagedPad) * sizeof(uint16_t);
  const uint32_t slot_bytes = 4 * sh.cmax * (512 + 32);
  // Launched as a programmatic dependent launch (kFusedSplitPdl), the CTAs get here while
  // the kernel before (moe_permute, or the previous call, which zeroes the workspace) drains;
  // everything below may read what it wrote. A no-op otherwise.
  pdl_bulk::pdl_wait();
  list_touched_experts(offsets, experts, s_list, &s_count);
  if (tid == 32) {
    for (int i = 0; i < kStages; ++i) mbar_init(&full[i], 1), mbar_init(&empty[i], kWarps);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const uint32_t gate_units = uint32_t(s_count) * sh.gate_per_expert;
  const uint32_t all_units = gate_units + uint32_t(s_count) * sh.down_per_expert;
  // Units are handed out in runs of consecutive units of one expert (a "ticket"), so a CTA
  // restages its token rows once a run rather than once a unit; runs are short enough
  // (about a quarter of a CTA's fair share) that the tail stays small.
  const uint32_t down_units = all_units - gate_units;
  const uint32_t run_gate = min(sh.gate_per_expert, max(1u, gate_units / (gridDim.x * 4)));
  const uint32_t run_down = min(sh.down_per_expert, max(1u, down_units / (gridDim.x * 4)));
  const uint32_t tickets_gate_e = (sh.gate_per_expert + run_gate - 1) / run_gate;
  const uint32_t tickets_down_e = (sh.down_per_expert + run_down - 1) / run_down;
  const uint32_t tickets_gate = uint32_t(s_count) * tickets_gate_e, tickets_all = tickets_gate + uint32_t(s_count) * tickets_down_e;
  if (warp == kWarps) {  // producer
    if (lane == 0) {
      // The slot's gate/up expert, published (counter + 1) once the MMA warps hand the slot
      // back: their activation writes precede their arrivals on `empty`, which this thread
      // acquires before its gpu-scope fence and the count (the cooperative-groups grid-sync
      // pattern), so the MMA warps never stall on a fence.
      int pending[kStages];
      for (int j = 0; j < kStages; ++j) pending[j] = -1;
      auto reclaim = [&](uint32_t slot, uint32_t use) {  // wait for use `use` of the slot to end
        mbar_wait(&empty[slot], use & 1);
        if (pending[slot] >= 0) {
          __threadfence();
          atomicAdd(&expert_counters(sched)[pending[slot]], 1u);
          pending[slot] = -1;
        }
      };
      uint32_t run_next = 0, run_left = 0, i = 0;
      for (;; ++i) {
        const uint32_t slot = i % kStages;
        if (i >= kStages) reclaim(slot, i / kStages - 1);
        if (kStagger && i == 1) mbar_wait(&full[0], 0);
        if (run_left == 0) {
          const uint32_t ticket = atomicAdd(&sched->next, 1u);
          if (ticket >= tickets_all) break;
          if (ticket < tickets_gate) {
            const uint32_t m0 = (ticket % tickets_gate_e) * run_gate;
            run_next = (ticket / tickets_gate_e) * sh.gate_per_expert + m0;
            run_left = min(run_gate, sh.gate_per_expert - m0);
          } else {
            const uint32_t d = ticket - tickets_gate, m0 = (d % tickets_down_e) * run_down;
            run_next = gate_units + (d / tickets_down_e) * sh.down_per_expert + m0;
            run_left = min(run_down, sh.down_per_expert - m0);
          }
        }
        const uint32_t u = run_next++;
        --run_left;
        s_unit[slot] = static_cast<int>(u);
        uint8_t* dst = ring + size_t(slot) * slot_bytes;
        uint8_t* dst_scales = dst + size_t(4) * sh.cmax * 512;
        if (u < gate_units) {
          const uint32_t e = s_list[u / sh.gate_per_expert], n = (u % sh.gate_per_expert) * 2;
          pending[slot] = static_cast<int>(e);
          const size_t tile0 = (size_t(e) * sh.gate_tiles + n) * sh.gate_chunks;
          const uint32_t pb = 2 * sh.gate_chunks * 512, sb = 2 * sh.gate_chunks * 32;
          mbar_arrive_expect_tx(&full[slot], 2 * (pb + sb));
          bulk_copy(dst, w1.packed + tile0 * 512, pb, &full[slot]);
          bulk_copy(dst + pb, w3.packed + tile0 * 512, pb, &full[slot]);
          bulk_copy(dst_scales, w1.scales + tile0 * 32, sb, &full[slot]);
          bulk_copy(dst_scales + sb, w3.scales + tile0 * 32, sb, &full[slot]);
        } else {
          const uint32_t d = u - gate_units;
          const uint32_t e = s_list[d / sh.down_per_expert], n = (d % sh.down_per_expert) * 4;
          const size_t tile0 = (size_t(e) * sh.down_tiles + n) * sh.down_chunks;
          const uint32_t pb = 4 * sh.down_chunks * 512, sb = 4 * sh.down_chunks * 32;
          mbar_arrive_expect_tx(&full[slot], pb + sb);
          bulk_copy(dst, w2.packed + tile0 * 512, pb, &full[slot]);
          bulk_copy(dst_scales, w2.scales + tile0 * 32, sb, &full[slot]);
        }
      }
      // Sentinel in slot i % kStages (already reclaimed above when i >= kStages), then
      // publish the one slot still out (use i - 1).
      const uint32_t slot = i % kStages;
      s_unit[slot] = -1;
      mbar_arrive(&full[slot]);
      if (i >= 1) reclaim((i - 1) % kStages, (i - 1) / kStages);
    }
    __syncwarp();
  } else {  // the MMA warps
    int staged_key = -1, buf = 0;
    for (uint32_t i = 0;; ++i) {
      const uint32_t slot = i % kStages;
      mbar_wait(&full[slot], (i / kStages) & 1);
      const int u = s_unit[slot];
      if (u < 0) break;
      const uint8_t* src = ring + size_t(slot) * slot_bytes;
      if (uint32_t(u) < gate_units) {
        const int e = s_list[u / sh.gate_per_expert];
        const uint32_t n = (u % sh.gate_per_expert) * 2;
        run_unit<true, kWide, kSplit, kWarps>(src, sh.cmax, sh.gate_chunks, e, n, offsets[e], offsets[e + 1], x, sh.gate_chunks * 128, act,
                              sh.gate_tiles * 8, fn, x_s, s_red, staged_key, buf, sh.gate_per_expert, expert_counters(sched));
      } else {
        const uint32_t d = u - gate_units;
        const int e = s_list[d / sh.down_per_expert];
        const uint32_t n = (d % sh.down_per_expert) * 4;
        run_unit<false, kWide, kSplit, kWarps>(src, sh.cmax, sh.down_chunks, e, n, offsets[e], offsets[e + 1], act, sh.down_chunks * 128, out,
                               sh.down_tiles * 8, fn, x_s, s_red, staged_key, buf, sh.gate_per_expert, expert_counters(sched));
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);  // this warp is done with the slot
    }
  }
  __syncthreads();
  if (tid == 0) {  // the last CTA out zeroes the queue and counters for the next launch
    __threadfence();
    if (atomicAdd(&sched->done, 1u) == gridDim.x - 1) {
      sched->next = 0;
      for (int e = 0; e < experts; ++e) expert_counters(sched)[e] = 0;
      sched->done = 0;
      __threadfence();
    }
  }
}

// The largest form's static shared memory: kFused's reduction (16 warps x 4 tiles).
constexpr size_t kStaticSmem = sizeof(int) * (kMaxExperts + 1 + kStages) + 2 * kStages * sizeof(uint64_t) + sizeof(RedBuf<kWaWarps, false>);
static_assert(sizeof(RedBuf<kWideWarps, true>) <= sizeof(RedBuf<kWaWarps, false>), "kStaticSmem bounds every form");

size_t dynamic_smem(int64_t dim, int64_t inter) {
  const int64_t cmax = std::max(dim, inter) / 128;
  return size_t(kWaTokens) * (cmax * 128 + kStagedPad) * sizeof(uint16_t) + size_t(kStages) * 4 * cmax * (512 + 32);
}

}  // namespace

bool decode_fused_fits(int64_t dim, int64_t inter) {
  constexpr size_t kOptin = 227 * 1024;  // sm_90's largest shared memory per CTA
  return dynamic_smem(dim, inter) + kStaticSmem + 2048 <= kOptin;
}

Status launch_decode_fused(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                           const MoeAct& fn, uint32_t* workspace, cudaStream_t stream, MoeDecodeKernel form) {
  const int64_t dim = w.w1.cols, inter = w.w1.rows;
  if (!decode_fused_fits(dim, inter)) return invalid_argument("moe_expert_mlp_decode: the fused kernel's ring does not fit");
  const Shape sh{static_cast<uint32_t>(inter / 8),  static_cast<uint32_t>(dim / 128),   static_cast<uint32_t>(inter / 16),
                 static_cast<uint32_t>(dim / 8),    static_cast<uint32_t>(inter / 128), static_cast<uint32_t>(dim / 32),
                 static_cast<uint32_t>(std::max(dim, inter) / 128)};
  const size_t smem = dynamic_smem(dim, inter);
  const int64_t max_units = experts * (sh.gate_per_expert + sh.down_per_expert);
  const bool wide = w.w1.wide_scales || w.w3.wide_scales || w.w2.wide_scales;  // the two-multiply path is exact for any scale
  const bool pdl = form == MoeDecodeKernel::kFusedSplitPdl;
  auto run = [&](auto kernel, int threads) -> Status {
    PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, smem, max_units, threads));
    PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(pdl, kernel, dim3(grid), dim3(threads), smem, stream, w.w1, w.w3, w.w2, sh,
                                                         offsets, static_cast<int>(experts), x, act, out, fn,
                                                         reinterpret_cast<Sched*>(workspace)),
                                    "moe decode fused launch"));
    return last_launch_status("moe decode fused");
  };
  constexpr int kStd = threads_all<kWaWarps>(), kMore = threads_all<kWideWarps>();
  switch (form) {
    case MoeDecodeKernel::kFused:
      return wide ? run(decode_fused<true, false, kWaWarps>, kStd) : run(decode_fused<false, false, kWaWarps>, kStd);
    case MoeDecodeKernel::kFusedSplit:
    case MoeDecodeKernel::kFusedSplitPdl:
      return wide ? run(decode_fused<true, true, kWaWarps>, kStd) : run(decode_fused<false, true, kWaWarps>, kStd);
    case MoeDecodeKernel::kFusedSplitStaggered:
      return wide ? run(decode_fused<true, true, kWaWarps, true>, kStd) : run(decode_fused<false, true, kWaWarps, true>, kStd);
    case MoeDecodeKernel::kFusedSplit24Warps:
      return wide ? run(decode_fused<true, true, kWideWarps>, kMore) : run(decode_fused<false, true, kWideWarps>, kMore);
    case MoeDecodeKernel::kFusedSplit24WarpsStaggered:
      return wide ? run(decode_fused<true, true, kWideWarps, true>, kMore) : run(decode_fused<false, true, kWideWarps, true>, kMore);
    default: return invalid_argument("moe_expert_mlp_decode: not a fused kernel");
  }
}

}  // namespace pdserve::cuda::moe_decode_detail
