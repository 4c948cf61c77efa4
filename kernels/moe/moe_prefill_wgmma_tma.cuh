// The templates of moe_expert_mlp_prefill's bulk-copy warpgroup-MMA forms, shared by the four
// translation units that instantiate them (moe_prefill_wgmma_tma_sm90.cu: kWgmmaTma, kWgmmaTma4,
// kWgmmaTmaMc; moe_prefill_wgmma_tma_tail_sm90.cu: kWgmmaTma160; moe_prefill_wgmma_tma_words_sm90.cu:
// kWgmmaTma160W; moe_prefill_wgmma_tma_narrow_sm90.cu: kWgmmaTmaNarrow), so each compiles on its own core. Internal linkage (anonymous namespace): each unit keeps its own copies.
// The forms (MoePrefillKernel::kWgmmaTma, kWgmmaTma4, kWgmmaTmaMc, kWgmmaTma160;
// contract: moe_prefill.h, design: docs/design.md). Same CTA tiles,
// same dequantisation and the same wgmma sequence per 64-row block as kWgmma (so the outputs
// are bit-identical to it); what changes is how the tokens arrive and how many warps run:
//   - The token rows (B) come by cp.async.bulk.tensor (a tensor map over x_sorted or act,
//     boxes of 64 inputs x 32 rows in the 128-byte swizzle the wgmma descriptors read),
//     issued by one thread into a 5-stage ring: no thread computes copy addresses any more
//     (the cp.async loop of kWgmma was about a fifth of its issue slots).
//   - Each stage has a full mbarrier (the copy engine completes its bytes) and an empty one
//     (every thread arrives once its wgmmas that read the stage are done), so there is no
//     CTA barrier in the main loop and the warpgroups drift apart freely.
//   - kWgmmaTma: two warpgroups, two m64 blocks each (kWgmma's split). kWgmmaTma4: four
//     warpgroups of one m64 block each (128 registers a thread): twice the warps a scheduler
//     to hide the dequantisation's dependent chains, the same dequantisation per FLOP.
//   - kWgmmaTma160: kWgmmaTma whose last token tile of an expert absorbs a tail of up to 32
//     rows (tiles of 128 in order, the last one up to 160: N 32..160), so an expert of 129..160
//     rows (EP4's ~146) is one tile: each weight chunk is dequantised once for all its tokens
//     instead of for a 128-token tile and again for a short tail tile. 160
//     accumulators a thread leave room for one chunk of packed words, not two: on the N = 160
//     tiles the next chunk's words are loaded in halves into the registers just dequantised
//     (after k-steps 3 and 7), as kWgmma160 does, and pulled into L2 two chunks ahead; the
//     N <= 128 tiles run kWgmmaTma's loop. The bulk copies leave no per-thread copy addresses
//     (kWgmma160's spills).
//   - kWgmmaTma160W (kAuto): kWgmmaTma160's loop with the packed words in the ring too, and token
//     tiles of 160 in order (no tail absorbed: 160 is the most a tile holds). Thread 0
//     adds, to each stage's token boxes, one box of the CTA tile's words a matrix (a map over the
//     decode layout as rows of 32-bit words, a decode-layout tile a row: 16 tiles of w1 and 16 of
//     w3, or 32 of w2, x one chunk's 512 bytes = 16 KB), completing on the same full barrier; each
//     lane reads its 8 bytes of its four tiles from the stage (k-steps 0-3), then the next 8 (4-7).
//     No thread loads, pulls into L2 or keeps words of a later chunk (ptxas: no spills at 255
//     registers where kWgmmaTma160 spills 24-28 bytes); the stage is 56 KB, so the ring is 4 deep (kAhead 2), and the
//     tile starts move to the dynamic shared memory past the ring (up to
//     kMoePrefillWordsMaxExperts experts; more run kWgmmaTma160). Its tiles of up to 128 tokens
//     dequantise a chunk's eight k-steps before issuing the chunk's MMAs as one group (kBatch). Thread 0
//     pulls each tile's scale bytes into L2 with one bulk prefetch a matrix at the tile's start.
//   - kWgmmaTmaNarrow (kAuto for chunks of at most kMoePrefillNarrowMaxRowsPerExpert rows an expert on
//     average): kWgmmaTma160W's word ring and k-step loop on token tiles of at most 64, 3 stages of
//     32 KB and 128 registers a thread, so two CTAs (two tiles' chains) share an SM.
//   - kWgmmaTmaMc: kWgmmaTma on 2-CTA thread-block clusters whose two CTAs compute two adjacent
//     output tiles (2u, 2u + 1) of the same (expert, token tile), so they read the same token
//     chunks: CTA rank r copies input half r of each chunk (its kN / 32 boxes) by
//     .multicast::cluster into both CTAs' ring slots, halving the token bytes read from L2.
//     Each CTA's full barrier expects the whole chunk (both halves, one arrival: its own thread
//     0); its empty barrier counts one arrival per warp of BOTH CTAs (lane 0 of each warp
//     arrives locally and on the peer through a mapa address), so neither CTA refills a slot
//     the other still reads. The pair is the scheduling unit (static stride by the cluster
//     count, or the queue: rank 0 claims and hands the unit to rank 1 by a store into its
//     shared memory and a remote mbarrier arrival). An odd last output tile runs with the peer
//     idle: its warpgroups are not `live` (rows past the end), it still copies its half and
//     counts its releases, and stores nothing. The gate/up epilogue stages in the ring, which
//     the peer's next-tile copies also write: it ends with a cluster barrier, not a CTA one.
// Rows of a box past the tile read the next expert's rows (or zeros past `capacity`, the copy
// engine's out-of-bounds fill); a token column of B only reaches the same column of the
// accumulators, which neither epilogue stores.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/cuda_check.h"
#include "common/tensor_map.h"
#include "common/pdl_bulk.cuh"
#include "moe/moe_prefill.h"
#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_internal.h"
#include "moe/moe_prefill_schedule.h"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

namespace {

using pdl_bulk::mbar_arrive;
using pdl_bulk::mbar_arrive_expect_tx;
using pdl_bulk::mbar_init;
using pdl_bulk::mbar_wait;
using pdl_bulk::smem_u32;

constexpr int kChunk = 128;      // inputs per ring stage
constexpr int kOutGated = 128;   // gate (and as many up) outputs a tile
constexpr int kOutDown = 256;    // down outputs a tile
constexpr int kMaxStages = 5;
constexpr int kBoxRows = 32;                // a tensor-map box: 64 inputs x 32 rows = 4 KB
constexpr int kBoxBytes = kBoxRows * 128;
constexpr int kActStride = kOutGated + 4;   // gate/up staging row (floats): 4 mod 32 banks

// The forms: kTwoBlocks = kWgmmaTma (and kWgmmaTmaMc), kOneBlock = kWgmmaTma4, kTwoBlocks160 =
// kWgmmaTma160, kTwoBlocks160W = kWgmmaTma160W. (A kOneBlock with wait_group 2 was dropped before it ran: at the 128-register cap
// of 512 threads ptxas serialised its wgmmas, warning C7512.)
enum Form : int { kTwoBlocks = 0, kOneBlock = 1, kTwoBlocks160 = 2, kTwoBlocks160W = 3, kNarrow = 4 };

// Timing experiments only (docs/perf.md "What holds kWgmmaTma160 below the bare loop"): compiled with
// -DPDS_PREFILL_TMA_ABLATE=mask (the moe_prefill_bench_tma_ablate target, opt-in), the forms skip
// parts of their memory traffic: 1 the packed words and scales after a tile's first chunk (each
// chunk dequantises the previous chunk's words plus one, so nothing is loop-invariant), 2 the
// token copies (the full barrier completes on a plain arrival; the MMAs read whatever the ring
// holds), 4 gate/up's stores of the activation (the fp32 staging stays), 8 down's stores of the
// outputs (skipped by a branch ptxas cannot resolve: with the stores gone it deletes the MMAs whose
// results nothing reads). The outputs are wrong; 0 (the library) changes nothing.
#ifndef PDS_PREFILL_TMA_ABLATE
#define PDS_PREFILL_TMA_ABLATE 0
#endif
constexpr int kAblate = PDS_PREFILL_TMA_ABLATE;
__device__ __forceinline__ void ablate_bump(uint4& q) { q.x += 1u, q.y += 1u, q.z += 1u, q.w += 1u; }

// Cluster helpers (kWgmmaTmaMc).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// The shared address `addr` of this CTA mapped to the same offset in the cluster's CTA `cta`.
__device__ __forceinline__ uint32_t map_to_cta(uint32_t addr, uint32_t cta) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(cta));
  return r;
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, unsigned parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void st_cluster_u32(uint32_t cluster_addr, uint32_t v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(cluster_addr), "r"(v) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// kBlocks m64 blocks a warpgroup; 4 / kBlocks warpgroups cover the CTA tile's four m64 blocks
// (gate/up: 2 gate + 2 up; down: 4).
template <int kForm>
struct Cfg {
  static constexpr int kBlocks = kForm == kOneBlock ? 1 : 2;
  static constexpr bool kBig = kForm == kTwoBlocks160 || kForm == kTwoBlocks160W;  // tails absorbed (tiles up to 160)
  // kTwoBlocks160W: the packed words ride the token ring (bulk copies into each stage), so no thread
  // loads them from global memory; the stage grows by the CTA tile's words and the ring is 4 deep.
  static constexpr bool kWords = kForm == kTwoBlocks160W || kForm == kNarrow;
  // kNarrow (kWgmmaTmaNarrow): kTwoBlocks160W's ring on token tiles of 64, two CTAs an SM (128
  // registers a thread): 3 stages of 32 KB a CTA, so each SM holds two tiles' chains at once.
  static constexpr bool kNarrowForm = kForm == kNarrow;
  static constexpr int kMinBlocks = kNarrowForm ? 2 : 1;
  static constexpr int kStages = kNarrowForm ? 3 : kWords ? 4 : 5;
  // Chunks in flight ahead of the MMAs: a stage is refilled two chunks after its use. (kWords with the
  // refill issued as soon as every thread released the stage, 3 chunks ahead of 4 stages: 0.86-0.90x,
  // docs/perf.md "The packed words through the token ring".)
  static constexpr int kAhead = kStages - 2;
  // An expert's token tiles in order. kWords: tiles of 160 (its loop keeps 160 accumulators without
  // spilling), so a large expert dequantises each weight chunk once per 160 tokens, not 128 (Zipf
  // 1.03-1.05x, one hot expert 1.01-1.03x; an expert of up to 160 rows is one tile either way).
  static constexpr int kStep = kNarrowForm ? 64 : kWords ? 160 : 128;
  static constexpr int kAbsorb = kBig && kStep == 128 ? 32 : 0;  // a last tile of at most this many rows joins the one before
  static constexpr int kTokTile = kStep + kAbsorb;      // tokens of one expert a tile: the largest wgmma N used
  static constexpr int kHalfBytes = kTokTile * 128;     // 64 inputs x the tokens: one column of swizzle atoms
  // kWords: a stage's words, after its tokens: the CTA tile's 32 decode-layout tiles (128 gate + 128
  // up rows, or 256 down rows) x 512 bytes of one chunk.
  static constexpr int kWordBytes = kWords ? 32 * 512 : 0;
  static constexpr int kStageBytes = 2 * kHalfBytes + kWordBytes;
  static constexpr size_t kRingBytes = size_t(kStages) * kStageBytes;
  static constexpr size_t kSmem = kRingBytes + 1024;    // + the 1024-byte alignment the swizzle atoms need
                                                        // (kWords: + the tile starts, sized at launch)
  static_assert(kStages <= kMaxStages, "barrier arrays");
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle atoms 1024-aligned");
  static_assert(size_t(2) * kTokTile * kActStride * 4 <= kRingBytes, "the staged gate/up tile must fit in the ring");
  static_assert(kHalfBytes % 1024 == 0 && kTokTile % kBoxRows == 0, "swizzle atoms 1024-aligned, whole boxes");
  static constexpr int kPending = 1;  // wgmma groups left running after each k-step
  static constexpr int kWgs = 4 / kBlocks;
  static constexpr int kThreads = 128 * kWgs;
  static constexpr int kQ = 2 * kBlocks;  // decode-layout tiles a warp reads a chunk
};

struct Ring {
  uint64_t* full;
  uint64_t* empty;
  uint32_t base;        // shared address of stage 0 (1024-aligned)
  uint32_t rank = 0;    // kMc: this CTA's rank in the cluster
  uint32_t peer_empty = 0;  // kMc: the peer's empty[0] (cluster address)
  bool solo = false;        // kMc diagnostic (PDS_PREFILL_MC_SOLO=1): each CTA copies the whole chunk to itself, no multicast
};

__device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
}
// The same box into the same offset of every CTA in `mask`, completing on each one's barrier at bar's offset.
__device__ __forceinline__ void tma_box_mc(uint32_t dst, const CUtensorMap* map, int col, int row, uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar)), "h"(mask)
      : "memory");
}

// kWords: the words of a tile's chunk c (maps over the decode layout as rows of 32-bit words, one
// decode-layout tile a row: encode_words_map).
struct WordMaps {
  const CUtensorMap* a;  // gate (w1) or down (w2): boxes of 16 tiles (gate/up) or 32 (down)
  const CUtensorMap* b;  // up (w3); gate/up only
  int tile;              // the CTA tile's first decode-layout tile (the same in both)
};

// Thread 0: chunk c of the tile (rows tok0 .., kN of them) as the CTA's n-th fill, once every
// thread released the fill that used the stage before.
// kMc: every thread of both CTAs released it; this CTA copies input half `rank` to both.
// C::kWords: the chunk's words too, after the tokens (gate/up: 16 tiles of w1, then 16 of w3).
template <class C, int kN, bool kMc, bool kGated>
__device__ __forceinline__ void issue_chunk(const CUtensorMap* map, const Ring& r, uint32_t n, int c, int tok0, const WordMaps& wm) {
  constexpr int kHalfBytes = C::kHalfBytes, kStageBytes = C::kStageBytes, kStages = C::kStages;
  const uint32_t slot = n % kStages;
  if (n >= kStages) mbar_wait(&r.empty[slot], ((n / kStages) - 1) & 1);
  if constexpr ((kAblate & 2) != 0) {
    mbar_arrive(&r.full[slot]);
    return;
  }
  mbar_arrive_expect_tx(&r.full[slot], kN * 256 + C::kWordBytes);  // the whole chunk, both halves (and its words)
  const uint32_t dst = r.base + slot * kStageBytes;
  if constexpr (C::kWords) {
    const uint32_t wdst = dst + 2 * kHalfBytes;
    if constexpr (kGated) {
      tma_box(wdst, wm.a, c * 128, wm.tile, &r.full[slot]);  // a chunk's 512 bytes a tile = 128 words
      tma_box(wdst + C::kWordBytes / 2, wm.b, c * 128, wm.tile, &r.full[slot]);
    } else {
      tma_box(wdst, wm.a, c * 128, wm.tile, &r.full[slot]);
    }
  }
  if (kMc && !r.solo) {
    const int h = static_cast<int>(r.rank);
#pragma unroll
    for (int b = 0; b < kN / kBoxRows; ++b)
      tma_box_mc(dst + h * kHalfBytes + b * kBoxBytes, map, c * kChunk + 64 * h, tok0 + kBoxRows * b, &r.full[slot], 0x3);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int b = 0; b < kN / kBoxRows; ++b) tma_box(dst + h * kHalfBytes + b * kBoxBytes, map, c * kChunk + 64 * h, tok0 + kBoxRows * b, &r.full[slot]);
  }
}

// kWords: half `part` (bytes 8 part .. 8 part + 7) of the lane's 16 bytes of each of its four tiles
// in the stage's words at shared address `words`.
__device__ __forceinline__ void lds_words(uint32_t words, const uint32_t (&ofs)[4], int part, uint2 (&q)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(q[j].x), "=r"(q[j].y) : "r"(words + ofs[j] + 8u * part) : "memory");
}

// One tile (kWgmma's: 128 gate + 128 up outputs, or 256 down outputs, x up to 128 tokens).
// Warpgroup wg's m64 blocks: kBlocks 2: gate/up rows 64 wg of w1 and w3, down rows 128 wg and
// + 64; kBlocks 1: gate/up rows 64 (wg % 2) of w1 (wg < 2) or w3, down rows 64 wg. `seq`: the
// CTA's fills so far (every thread keeps the same count).
template <int kForm, bool kGated, bool kWide, int kN, bool kMc>
__device__ __forceinline__ void run_tile(const Mxfp4Decode& a, const Mxfp4Decode& b, const CUtensorMap* map, const CUtensorMap* wmap_a,
                                         const CUtensorMap* wmap_b, uint16_t* __restrict__ act_out, float* __restrict__ out,
                                         const MoeAct& fn, uint8_t* smem, const Ring& ring, uint32_t& seq, const Tile& tl) {
  using C = Cfg<kForm>;
  constexpr int kStages = C::kStages, kAhead = C::kAhead;
  constexpr int kBlocks = C::kBlocks;
  constexpr int kOut = kGated ? kOutGated : kOutDown, kQ = C::kQ, kThreads = C::kThreads;
  constexpr int kHalfBytes = C::kHalfBytes, kStageBytes = C::kStageBytes, kTokTile = C::kTokTile;
  // kBig's tiles past 128 tokens: one chunk of packed words in registers, refilled in halves (at
  // N <= 128 the two-chunk form has the registers, and its loads a whole chunk ahead).
  // kWords: every tile takes its words from the ring, the short tails too. (Tails under 128 or 160
  // tokens kept on kWgmmaTma's register words made the whole kernel 3-6% slower on uniform rows,
  // whose tiles are all N = 160: one register allocation serves every N; docs/perf.md.)
  constexpr bool kHalves = C::kBig && !C::kWords && kN > 128;
  // kWords' tiles of up to 128 tokens: a chunk's eight k-steps dequantised before any of its MMAs,
  // which then go as one group (below), instead of a wait for the k-step before each k-step's MMAs.
  // Their accumulators leave room for all eight k-steps' A operands (no spills, no serialised wgmma),
  // and a narrow k-step's MMAs are too short to hide the next dequantisation behind (docs/perf.md
  // "Narrow tiles: a chunk's MMAs as one group": skewed routings 3-5% faster). kWords has kQ == 4.
  constexpr bool kBatch = C::kWords && kN <= 128 && !C::kNarrowForm;  // kNarrow: 64 A registers do not fit its 128
  static_assert(!C::kWords || (C::kBlocks == 2 && !kMc), "kWords: two m64 blocks a warpgroup, no cluster");
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(a.rows), cols = static_cast<int>(a.cols), chunks = cols / kChunk, rtiles = rows / 8;
  const int r0 = kBlocks == 2 ? (kGated ? tl.ot * kOut + 64 * wg : tl.ot * kOut + 128 * wg)
                              : (kGated ? tl.ot * kOut + 64 * (wg & 1) : tl.ot * kOut + 64 * wg);
  const int r1 = kBlocks == 2 && !kGated ? r0 + 64 : r0;
  const Mxfp4Decode& m0 = (kBlocks == 1 && kGated && wg >= 2) ? b : a;
  const Mxfp4Decode& m1 = kGated ? b : a;
  const bool live = r1 + 64 <= rows;  // rows are a multiple of 128: a warpgroup's rows are all real or none
  // The stage of fill m is free again as far as this thread (kMc: this warp, after its
  // .aligned wgmma wait or full wait) is concerned.
  auto release = [&](uint32_t m) {
    const uint32_t slot = m % kStages;
    if constexpr (kMc) {
      if (lane == 0) {
        mbar_arrive(&ring.empty[slot]);
        mbar_arrive_cluster(ring.peer_empty + slot * 8);
      }
    } else {
      mbar_arrive(&ring.empty[slot]);
    }
  };

  const int tile_bytes = chunks * 512;  // a decode-layout tile's packed bytes (< 2^31: cols < 2^24)
  const int64_t t0 = int64_t(tl.e) * rtiles + r0 / 8 + 2 * warp, t1 = int64_t(tl.e) * rtiles + r1 / 8 + 2 * warp;
  const uint8_t* pa = m0.packed + t0 * tile_bytes + lane * 16;
  const uint8_t* pb = m1.packed + t1 * tile_bytes + lane * 16;
  const uint8_t* sa = m0.scales + t0 * chunks * 32 + g * 4;
  const uint8_t* sb = m1.scales + t1 * chunks * 32 + g * 4;
  // kWords: the lane's 16 bytes of its four tiles in a stage's words (issue_chunk's layout: the CTA
  // tile's decode-layout tiles in order, gate/up's w3 tiles 16 on).
  const uint32_t wa = uint32_t((r0 - tl.ot * kOut) / 8 + 2 * warp) * 512u + lane * 16u;
  const uint32_t wb = uint32_t((r1 - tl.ot * kOut) / 8 + 2 * warp + (kGated ? 16 : 0)) * 512u + lane * 16u;
  [[maybe_unused]] const uint32_t wofs[4] = {wa, wa + 512u, wb, wb + 512u};
  auto load_w = [&](int c, uint4 (&q)[kQ], uint32_t (&s)[kQ]) {
    q[0] = __ldg(reinterpret_cast<const uint4*>(pa + c * 512));
    q[1] = __ldg(reinterpret_cast<const uint4*>(pa + tile_bytes + c * 512));
    s[0] = __ldg(reinterpret_cast<const uint32_t*>(sa + c * 32));
    s[1] = __ldg(reinterpret_cast<const uint32_t*>(sa + chunks * 32 + c * 32));
    if constexpr (kQ == 4) {
      q[2] = __ldg(reinterpret_cast<const uint4*>(pb + c * 512));
      q[3] = __ldg(reinterpret_cast<const uint4*>(pb + tile_bytes + c * 512));
      s[2] = __ldg(reinterpret_cast<const uint32_t*>(sb + c * 32));
      s[3] = __ldg(reinterpret_cast<const uint32_t*>(sb + chunks * 32 + c * 32));
    }
  };

  const WordMaps wm{wmap_a, wmap_b, tl.e * rtiles + tl.ot * kOut / 8};
  if constexpr (C::kWords) {
    // The CTA tile's scale bytes pulled into L2 at its start, one bulk prefetch a matrix (gate/up: the
    // 16 decode-layout tiles of w1 and of w3, down: up to 32 of w2; each run is contiguous), so that
    // the scale words' loads a chunk ahead find them in L2, not DRAM (the first use of a scale word
    // held 8.8% of a narrow tile's stall samples; the narrowest tiles 1-3% faster, the routings
    // level: docs/perf.md "The tile's scales pulled into L2").
    if (tid == 0) {
      const int tiles = min(kOut, rows - tl.ot * kOut) / 8;  // a last down tile may hold 128 real rows of 256
      const uint32_t bytes = uint32_t(tiles) * uint32_t(chunks) * 32u;
      const int64_t first = int64_t(wm.tile) * chunks * 32;
      pdl_bulk::bulk_prefetch_l2(a.scales + first, bytes);
      if constexpr (kGated) pdl_bulk::bulk_prefetch_l2(b.scales + first, bytes);
    }
  }
  if (tid == 0)
    for (int s = 0; s < kAhead && s < chunks; ++s) issue_chunk<C, kN, kMc, kGated>(map, ring, seq + s, s, tl.tok0, wm);
  __syncwarp();

  float acc0[kN / 2], acc1[kBlocks == 2 ? kN / 2 : 1];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc0[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < int(sizeof(acc1) / 4); ++i) acc1[i] = 0.0f;

  // kHalves: the words of chunk c pulled into L2 two chunks ahead of their use, so that the
  // half-chunk refills below (only half a chunk ahead of their use) find them there (measured:
  // 1.04-1.06x on uniform rows; on the N <= 128 tiles, whose loads run a chunk ahead, no gain;
  // as cp.async.bulk.prefetch.L2 from 8 lanes 0.83-0.95x: ptxas loops it over the lanes).
  [[maybe_unused]] auto pull_l2 = [&](int c) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(pa + c * 512));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(pa + tile_bytes + c * 512));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(pb + c * 512));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(pb + tile_bytes + c * 512));
  };
  [[maybe_unused]] uint4 qn[C::kWords ? 1 : kQ];
  uint32_t sn[kQ];
  if constexpr (C::kWords) {
    if (live) load_scales(sa, sb, chunks, 0, sn);
  } else {
    if (live) load_w(0, qn, sn);
  }
  if constexpr (kHalves)
    if (live && chunks > 1) pull_l2(1);
  // Thread 0 refills the stage two chunks after its use; every thread waits for chunk c's tokens.
  auto fill_and_wait = [&](int c) {
    const uint32_t n = seq + c;
    if (tid == 0 && c + kAhead < chunks) issue_chunk<C, kN, kMc, kGated>(map, ring, n + kAhead, c + kAhead, tl.tok0, wm);
    __syncwarp();  // warp 0 whole again before the .aligned wgmma instructions
    mbar_wait(&ring.full[n % kStages], (n / kStages) & 1);
  };
  // `live` picks the loop once: tested on every chunk inside the main loop, ptxas re-derived it
  // from a spilled tile coordinate, a local load that ncu showed on each chunk's critical path
  // (4.6% of gate/up's stall samples; docs/perf.md "Where kWgmmaTma160's stalls are").
  if (!live) {
    for (int c = 0; c < chunks; ++c) {  // nothing to compute, but each stage's release is counted per thread
      fill_and_wait(c);
      release(seq + c);
    }
  } else {
    for (int c = 0; c < chunks; ++c) {
      const uint32_t n = seq + c, slot = n % kStages;
      if constexpr (kHalves)
        if (c + 2 < chunks && (kAblate & 1) == 0) pull_l2(c + 2);
      fill_and_wait(c);
      [[maybe_unused]] uint4 q[kHalves || C::kWords ? 1 : kQ];
      [[maybe_unused]] uint2 qh[C::kWords ? kQ : 1];  // kWords: half of each tile's word (k-steps 0-3, then 4-7)
      uint32_t sc[kQ];
      if constexpr (C::kWords) {
#pragma unroll
        for (int j = 0; j < kQ; ++j) sc[j] = sn[j];
        if (c + 1 < chunks) load_scales(sa, sb, chunks, c + 1, sn);
        lds_words(ring.base + slot * kStageBytes + 2 * kHalfBytes, wofs, 0, qh);
      } else if constexpr (kHalves) {
        // One chunk of words: this chunk's in qn, the next one's loaded in halves below (next_half);
        // only the scale words a chunk ahead here.
#pragma unroll
        for (int j = 0; j < kQ; ++j) sc[j] = sn[j];
        if (c + 1 < chunks && (kAblate & 1) == 0) load_scales(sa, sb, chunks, c + 1, sn);
      } else {
#pragma unroll
        for (int j = 0; j < kQ; ++j) q[j] = qn[j], sc[j] = sn[j];
        if constexpr ((kAblate & 1) != 0) {
#pragma unroll
          for (int j = 0; j < kQ; ++j) ablate_bump(qn[j]);
        } else if (c + 1 < chunks) {
          load_w(c + 1, qn, sn);  // a chunk ahead, in registers
        }
      }
      // kHalves: words 0-1 of every tile (k-steps 0-3) or 2-3 (k-steps 4-7) of the next chunk, into
      // the registers those k-steps have just dequantised.
      [[maybe_unused]] auto next_half = [&](auto part) {
        if constexpr ((kAblate & 1) != 0) {
#pragma unroll
          for (int j = 0; j < kQ; ++j) (part == 0 ? qn[j].x : qn[j].z) += 1u, (part == 0 ? qn[j].y : qn[j].w) += 1u;
        } else {
          load_words_half(pa, pb, tile_bytes, c + 1, part, qn);
        }
      };
      auto word = [&](int j, int i) {
        if constexpr (C::kWords) return (i & 1) ? qh[j].y : qh[j].x;
        else return word_of(kHalves ? qn[j] : q[j], i);
      };
      const uint32_t sbase = ring.base + slot * kStageBytes;
      const uint32_t dlo = sw128_desc_lo(sbase);  // k-step s's descriptor: sw128_desc_at(dlo, its offset)
      // k-step s (input group s / 2, half s % 2): the A operands of the first m64 block (fa) and the second (fb).
      auto dequant_step = [&](int s, uint32_t (&fa)[4], uint32_t (&fb)[4]) {
        const int i = s >> 1, h = s & 1;
        const uint32_t sel = 0x4440u + i;  // byte i of a scale word, zero-extended, in one PRMT (a shift and a mask before)
        uint32_t lo[2], hi[2];
        dequant_half<kWide>(word(0, i), __byte_perm(sc[0], 0u, sel), h, lo);
        dequant_half<kWide>(word(1, i), __byte_perm(sc[1], 0u, sel), h, hi);
        fa[0] = lo[0], fa[1] = hi[0], fa[2] = lo[1], fa[3] = hi[1];
        if constexpr (kQ == 4) {
          dequant_half<kWide>(word(2, i), __byte_perm(sc[2], 0u, sel), h, lo);
          dequant_half<kWide>(word(3, i), __byte_perm(sc[3], 0u, sel), h, hi);
          fb[0] = lo[0], fb[1] = hi[0], fb[2] = lo[1], fb[3] = hi[1];
        }
      };
      if constexpr (kBatch) {
        // Narrow tiles: the chunk's eight k-steps dequantised first, then their MMAs issued back to
        // back as one group, waited for at the chunk's end (nothing in flight across the loop).
        uint32_t fa[8][4], fb[8][4];
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          if (s == 4)  // k-steps 0-3 have read words .x / .y: the stage's .z / .w into the same registers
            lds_words(ring.base + slot * kStageBytes + 2 * kHalfBytes, wofs, 1, qh);
          dequant_step(s, fa[s], fb[s]);
        }
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          const uint64_t desc = sw128_desc_at(dlo, (s >> 2) * kHalfBytes + (s & 3) * 32);
          wgmma_rs<kN>(acc0, fa[s], desc);
          wgmma_rs<kN>(acc1, fb[s], desc);  // kWords: two m64 blocks a warpgroup
        }
        wgmma_commit();
        wgmma_wait<0>();
        release(n);
      } else {
#pragma unroll
        for (int s = 0; s < 8; ++s) {  // k-step s: group i = s / 2, half h = s % 2
          uint32_t fa[4], fb[4] = {0u, 0u, 0u, 0u};
          dequant_step(s, fa, fb);
          if constexpr (kHalves)
            if ((s & 3) == 3 && c + 1 < chunks) next_half(s >> 2);
          if constexpr (C::kWords)  // k-steps 0-3 have read words .x / .y: the stage's .z / .w into the same registers
            if (s == 3) lds_words(ring.base + slot * kStageBytes + 2 * kHalfBytes, wofs, 1, qh);
          const uint64_t desc = sw128_desc_at(dlo, (s >> 2) * kHalfBytes + (s & 3) * 32);
          wgmma_fence();
          wgmma_rs<kN>(acc0, fa, desc);
          if constexpr (kBlocks == 2) wgmma_rs<kN>(acc1, fb, desc);
          wgmma_commit();
          wgmma_wait<C::kPending>();  // k-step s - kPending is done: its A registers are free
          // From k-step kPending - 1 on, the previous chunk's wgmmas are all done: its stage may be refilled.
          if (s == C::kPending - 1 && c > 0) release(n - 1);
        }
      }
    }
  }
  wgmma_wait<0>();  // unconditional: ptxas cannot tie `live` to the loop's wgmmas and would serialise them
  if (live && !kBatch) release(seq + chunks - 1);  // kBatch released each chunk's stage in the loop
  seq += chunks;
  // Gate/up: every warpgroup is done with the ring, which the staging reuses. Down tiles need no
  // CTA barrier (the empty barriers guard the ring; the queue's next tile is published through
  // the full barriers, kernel below), so a warpgroup goes on to its stores and the next tile
  // without waiting for the other (ncu: 2.9% of down's samples waited here).
  if constexpr (kGated || kMc) __syncthreads();

  // Accumulator element 4j + v: weight row 16 warp + g + 8 (v / 2) of the block, token 8j + 2t + v % 2.
  if constexpr (kGated) {
    float* sg = reinterpret_cast<float*>(smem);
    float* su = sg + kTokTile * kActStride;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1), f = 16 * warp + g + 8 * (v >> 1);
        if constexpr (kBlocks == 2) {
          sg[tok * kActStride + 64 * wg + f] = acc0[4 * j + v];
          su[tok * kActStride + 64 * wg + f] = acc1[4 * j + v];
        } else {
          (wg < 2 ? sg : su)[tok * kActStride + 64 * (wg & 1) + f] = acc0[4 * j + v];
        }
      }
    __syncthreads();
    // act in wgmma_k_position order (the down launch's B): pairs stay adjacent.
    uint16_t* dst = act_out + int64_t(tl.tok0) * rows + tl.ot * kOut;
    const int nstore = (kMc && tl.ot * kOut >= rows) || (kAblate & 4) != 0 ? 0 : tl.ntok;  // kMc: an idle peer past the last output tile
    // A thread keeps one output pair (f, f + 1) and steps through the tokens. Rolled: unrolled by 2
    // or 4, ptxas spilled inside the N = 160 main loop (this pass is ~10% of the whole on uniform
    // rows: docs/perf.md "What holds kWgmmaTma160 below the bare loop").
    const int f = 2 * (tid % (kOut / 2)), pos = (f & ~31) | wgmma_k_position(f & 31);
#pragma unroll 1
    for (int tok = tid / (kOut / 2); tok < nstore; tok += kThreads / (kOut / 2)) {
      const float2 gv = *reinterpret_cast<const float2*>(sg + tok * kActStride + f);
      const float2 uv = *reinterpret_cast<const float2*>(su + tok * kActStride + f);
      *reinterpret_cast<__nv_bfloat162*>(dst + int64_t(tok) * rows + pos) = __floats2bfloat162_rn(act_fast(fn, gv.x, uv.x), act_fast(fn, gv.y, uv.y));
    }
    // The staging's generic-proxy accesses come before the next tile's bulk copies into it.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if constexpr (kMc) cluster_sync();  // the peer's next-tile copies land in this ring too
    else __syncthreads();
  } else {
    if (!live) return;
    if constexpr ((kAblate & 8) != 0)
      if (tl.ntok >= 0) return;  // always, but ptxas cannot tell: the stores stay reachable, so the MMAs stay
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1);
        if (tok >= tl.ntok) continue;
        const int f = 16 * warp + g + 8 * (v >> 1);
        float* o = out + (tl.tok0 + int64_t(tok)) * rows;
        o[r0 + f] = acc0[4 * j + v];
        if constexpr (kBlocks == 2) o[r1 + f] = acc1[4 * j + v];
      }
  }
}

template <int kForm, bool kGated, bool kWide, bool kQueue, bool kMc>
__global__ void __launch_bounds__(Cfg<kForm>::kThreads, Cfg<kForm>::kMinBlocks)
    prefill_wgmma_tma(const __grid_constant__ CUtensorMap map, const __grid_constant__ CUtensorMap wmap_a,  // wmap_*: kWords only
                      const __grid_constant__ CUtensorMap wmap_b, Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets,
                      int experts, uint16_t* __restrict__ act_out, float* __restrict__ out, MoeAct fn,
                      TileQueue* queue_ptr,  // null unless kQueue
                      int solo) {
  using C = Cfg<kForm>;
  extern __shared__ uint8_t smem_raw[];
  // kWords: the tile starts live past the ring in the dynamic part (the ring leaves no room for 4 KB of static ones).
  __shared__ int tile_start_static[C::kWords ? 1 : kMaxExperts + 1];
  // kQueue: thread 0 fetches tile it + 1 while tile it runs, into next_tile[it % 8]. Every
  // thread reads it after tile it: thread 0 wrote it before its first arrive.expect_tx of tile it
  // (release), which each thread's wait on that fill's full barrier acquires. Down tiles end
  // without a CTA barrier, so thread 0 may run ahead of the slowest warp, but by at most six
  // tiles (it cannot refill a stage the slowest warp has not released, five fills back, and a
  // tile is at least one fill): eight slots are never rewritten before they are read.
  __shared__ int next_tile[8];
  __shared__ uint64_t full_bar[kMaxStages], empty_bar[kMaxStages];
  __shared__ uint64_t unit_bar[2];  // kMc && kQueue, rank 1: rank 0 delivered the unit in unit_mail
  __shared__ int unit_mail[2];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  int* tile_start = C::kWords ? reinterpret_cast<int*>(smem + C::kRingBytes) : tile_start_static;
  constexpr int kOut = kGated ? kOutGated : kOutDown, kStep = Cfg<kForm>::kStep, kAbsorb = Cfg<kForm>::kAbsorb;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full_bar[s], 1);
      mbar_init(&empty_bar[s], kMc ? 2 * Cfg<kForm>::kThreads / 32 : Cfg<kForm>::kThreads);  // kMc: a warp of either CTA
    }
    for (int s = 0; s < 2; ++s) mbar_init(&unit_bar[s], 1);
    pdl_bulk::mbar_init_fence();  // visible to the copy engine (and, kMc, to the peer)
  }
  const uint32_t rank = kMc ? cluster_rank() : 0u;
  const int units_in_grid = kMc ? int(gridDim.x / 2) : int(gridDim.x);
  const int out_tiles = (static_cast<int>(a.rows) + kOut - 1) / kOut;
  const int out_units = kMc ? (out_tiles + 1) / 2 : out_tiles;  // kMc: output tile pairs
  scan_tile_starts(offsets, experts, kStep, out_units, tile_start, kAbsorb);
  if constexpr (kMc) cluster_sync();  // the peer's barriers are initialised before any copy or arrival reaches them
  else __syncthreads();
  const int total = tile_start[experts];
  const Ring ring{full_bar, empty_bar, smem_u32(smem), rank, kMc ? map_to_cta(smem_u32(empty_bar), rank ^ 1u) : 0u, solo != 0};
  uint32_t seq = 0;

  int tile = kMc ? int(blockIdx.x / 2) : int(blockIdx.x);
  for (int it = 0; tile < total; ++it) {
    if (kQueue && threadIdx.x == 0 && rank == 0) {
      const int v = int(units_in_grid + atomicAdd(&queue_ptr->next, 1u));
      next_tile[it & 7] = v;
      if constexpr (kMc) {  // rank 1 takes the same unit; it reads the mail before it can let this CTA finish the next tile
        st_cluster_u32(map_to_cta(smem_u32(&unit_mail[it & 1]), 1u), uint32_t(v));
        mbar_arrive_cluster(map_to_cta(smem_u32(&unit_bar[it & 1]), 1u));
      }
    }
    const int e = expert_of_tile(tile_start, experts, tile), local = tile - tile_start[e];
    const int row_begin = offsets[e], nrows = offsets[e + 1] - row_begin;
    const int mtiles = token_tiles(nrows, kStep, kAbsorb);
    int ot, mt;
    prefill_tile_coords(local, mtiles, &ot, &mt);
    if constexpr (kMc) ot = 2 * ot + int(rank);
    const Tile tl{e, ot, row_begin + mt * kStep, mt == mtiles - 1 ? nrows - mt * kStep : kStep};  // the last tile: the rest
    const int nv = (tl.ntok + 31) >> 5;
    if constexpr (Cfg<kForm>::kNarrowForm) {  // tiles of at most 64 tokens: only the two narrow loops are compiled
      if (nv <= 1) run_tile<kForm, kGated, kWide, 32, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
      else run_tile<kForm, kGated, kWide, 64, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
    } else if (nv <= 1) run_tile<kForm, kGated, kWide, 32, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
    else if (nv == 2) run_tile<kForm, kGated, kWide, 64, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
    else if (nv == 3) run_tile<kForm, kGated, kWide, 96, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
    else if (nv == 4 || !Cfg<kForm>::kBig) run_tile<kForm, kGated, kWide, 128, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
    else if constexpr (Cfg<kForm>::kBig) run_tile<kForm, kGated, kWide, 160, kMc>(a, b, &map, &wmap_a, &wmap_b, act_out, out, fn, smem, ring, seq, tl);
    if constexpr (kMc && kQueue) {
      if (rank == 1) {
        if (threadIdx.x == 0) {
          mbar_wait_cluster(&unit_bar[it & 1], (it >> 1) & 1);
          next_tile[it & 7] = unit_mail[it & 1];
        }
        __syncthreads();
      }
    }
    tile = kQueue ? next_tile[it & 7] : tile + units_in_grid;
  }
  if (kQueue && threadIdx.x == 0) finish_tile_queue(queue_ptr);
  if constexpr (kMc) cluster_sync();  // no CTA leaves while the peer may still arrive on its barriers
}

// [rows][cols] bf16 rows (x_sorted or act), boxes of 64 inputs x kBoxRows rows, 128-byte
// swizzle, zeros past the last row.
Status encode_rows_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols) {
  const uint64_t extent[2] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  const uint64_t stride[1] = {static_cast<uint64_t>(cols * 2)};  // bytes between rows
  const uint32_t box[2] = {64, static_cast<uint32_t>(kBoxRows)};
  return encode_bf16_tensor_map(map, base, 2, extent, stride, box, "moe prefill tma");
}

// kWords: the packed words of `experts` stacked matrices (m.rows x m.cols each) as rows of 32-bit words,
// one decode-layout tile (8 rows, m.cols * 4 bytes) a row, boxes of one chunk (128 words) x `tiles` rows.
Status encode_words_map(CUtensorMap* map, const Mxfp4Decode& m, int64_t experts, uint32_t tiles) {
  const uint64_t extent[2] = {static_cast<uint64_t>(m.cols), static_cast<uint64_t>(experts * (m.rows / 8))};
  const uint32_t box[2] = {128, tiles};
  return encode_u32_tensor_map_2d(map, m.packed, extent, static_cast<uint64_t>(m.cols * 4), box, "moe prefill words");
}

// kWords: the dynamic shared memory for `experts` (the ring, the alignment slack, the tile starts).
template <int kForm>
size_t words_form_smem(int64_t experts) {
  return Cfg<kForm>::kSmem + static_cast<size_t>((experts + 1) * 4 + 15) / 16 * 16;
}

// kMc: clusters of 2 on the GPU at once (cached per kernel: later calls make no attribute calls).
template <typename Kernel>
Result<unsigned> cluster_pairs_for(Kernel kernel, int threads, size_t smem) {
  static struct {
    const void* k;
    int dev, n;
  } cache[8];
  static int used = 0;
  static std::mutex mu;  // the ranks of one process call this from their own threads
  int dev = 0;
  PDS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < used; ++i)
    if (cache[i].k == reinterpret_cast<const void*>(kernel) && cache[i].dev == dev) return unsigned(cache[i].n);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim = {2, 1, 1};
  cfg.gridDim = dim3(2);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  PDS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg), "cluster occupancy"));
  if (n <= 0) return invalid_argument("moe_expert_mlp_prefill: a 2-CTA cluster of the multicast kernel does not fit");
  if (used < 8) cache[used++] = {reinterpret_cast<const void*>(kernel), dev, n};
  return unsigned(n);
}

template <int kForm, bool kGated, bool kWide, bool kMc>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  constexpr int kThreads = Cfg<kForm>::kThreads, kStep = Cfg<kForm>::kStep;
  const size_t kSmem = Cfg<kForm>::kWords ? words_form_smem<kForm>(experts) : Cfg<kForm>::kSmem;
  CUtensorMap map, wmap_a, wmap_b;
  PDS_RETURN_IF_ERROR(encode_rows_map(&map, x, capacity, a.cols));
  if constexpr (Cfg<kForm>::kWords) {
    PDS_RETURN_IF_ERROR(encode_words_map(&wmap_a, a, experts, kGated ? 16 : 32));
    if (kGated) PDS_RETURN_IF_ERROR(encode_words_map(&wmap_b, b, experts, 16));
    else wmap_b = wmap_a;
  } else {
    wmap_a = wmap_b = map;  // unused
  }
  auto kernel = queue ? prefill_wgmma_tma<kForm, kGated, kWide, true, kMc> : prefill_wgmma_tma<kForm, kGated, kWide, false, kMc>;
  const int64_t per_tile = kGated ? kOutGated : kOutDown;
  const int64_t max_tiles = max_output_tiles(capacity, kStep, experts, a.rows, per_tile);  // absorbed tails only lower it
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, kSmem, max_tiles, kThreads));  // also raises the shared-memory limit
  if constexpr (!kMc) {
    kernel<<<grid, kThreads, kSmem, stream>>>(map, wmap_a, wmap_b, a, b, offsets, static_cast<int>(experts), act, out, fn, queue, 0);
  } else {
    PDS_ASSIGN_OR_RETURN(unsigned pairs, cluster_pairs_for(kernel, kThreads, kSmem));
    // Diagnostic (docs/perf.md, "Token multicast across a 2-CTA cluster"): the same clusters and
    // barriers without the multicast; and the cluster count, once.
    static const int solo = [] {
      const char* v = std::getenv("PDS_PREFILL_MC_SOLO");
      return v && v[0] == '1' ? 1 : 0;
    }();
    static bool told = false;
    if (!told && std::getenv("PDS_PREFILL_MC_VERBOSE")) std::fprintf(stderr, "kWgmmaTmaMc: %u clusters of 2 fit (solo %d)\n", pairs, solo);
    told = true;
    const int64_t units = max_output_tiles(capacity, kStep, experts, a.rows, 2 * per_tile);  // pairs of output tiles
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim = {2, 1, 1};
    cfg.gridDim = dim3(2 * static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(pairs, units))));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, map, wmap_a, wmap_b, a, b, offsets, static_cast<int>(experts), act, out, fn, queue, solo);
    if (err != cudaSuccess) return cuda_status(err, "moe_expert_mlp_prefill (wgmma tma multicast) launch");
  }
  return last_launch_status(kGated ? "moe_expert_mlp_prefill (wgmma tma) gate/up" : "moe_expert_mlp_prefill (wgmma tma) down");
}

template <int kForm, bool kMc = false>
Status run_both(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x_sorted,
                uint16_t* act, float* out_sorted, TileQueue* queue, cudaStream_t stream) {
  return run_gate_up_then_down(
      w, x_sorted, act, out_sorted,
      [&](auto gated, auto wide, const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* x, uint16_t* act_out, float* out,
          const MoeAct& fn) {
        return launch<kForm, decltype(gated)::value, decltype(wide)::value, kMc>(a, b, offsets, experts, capacity, x, act_out, out, fn, queue, stream);
      });
}

}  // namespace

}  // namespace pdserve::cuda::moe_prefill_detail
