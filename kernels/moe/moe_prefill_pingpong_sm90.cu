// moe_expert_mlp_prefill's "pingpong" warpgroup-MMA form (MoePrefillKernel::kWgmmaPingpong;
// contract: moe_prefill.h, design: docs/design.md). Two consumer warpgroups a CTA, each owning a
// WHOLE output tile, taking alternate tiles of the CTA's sequence, with ordered named barriers
// so that their main loops take turns on the tensor pipe: warpgroup w's tile j starts its
// k-loop only once the other warpgroup has issued the last wgmma of tile j - 1, so one
// warpgroup's drain (wait_group 0), epilogue and next-tile set-up run while the other's MMAs do
// (kWgmma's two warpgroups share every tile, so both drain and store at once with no MMA running).
//   - Tile of one warpgroup: kWgmmaTma's per-warpgroup work: gate/up 64 gate rows of w1 + the
//     same 64 rows of w3 (two m64 blocks), down 128 rows of w2 (two m64 blocks), x up to 128
//     tokens of one expert (N 32..128). Same dequantisation, same wgmma sequence and k order per
//     output as kWgmma: bit-identical. 128 fp32 accumulators a thread, as kWgmma (ptxas: gate/up
//     250-253 registers, no spills; down 255 with 16-20 bytes of spill stores): no producer
//     warpgroup, whose 384 threads would cap a consumer at 168 registers (setmaxnreg: 232-240).
//   - Tokens: each warpgroup has its own 3-slot ring (32 KB a slot: 128 inputs x 128 tokens in
//     the 128-byte swizzle) filled by bulk tensor copies issued by its first thread, two chunks
//     ahead (a slot is refilled right after the wgmma that read it is known done), full / empty
//     mbarriers per slot (released by a predicated arrive at k-step 0, refilled at k-step 1: a
//     branch there made ptxas serialise the wgmmas, C7513). The next tile's first two chunks are issued as soon as this tile's
//     k-loop ends, before its drain and epilogue. (Token tiles are read per warpgroup, not per
//     CTA: twice kWgmma's token bytes from L2 a MAC, which moepf6 found not to be the limit.)
//   - Gate/up epilogue: the activation in registers (a thread holds gate and up of the same
//     (row, token)), bf16 staged in the ring slot of the tile's last chunk (the next tile's first
//     two chunks go to the other two slots; the slot is released after the staging is read),
//     then coalesced 16-byte stores. 2 x 96 KB of ring: a separate 16 KB staging would not fit.
//   - Schedule: the CTA's tile sequence j = 0, 1, 2, ...: warpgroup j % 2 runs tile j. Tile 0 is
//     blockIdx.x, tile 1 claimed by thread 0 at the start (queue) or blockIdx.x + grid; the
//     holder of tile j claims tile j + 2 (its own next) once its turn starts (its first weight
//     words are loaded before it waits for the turn), so the claims are
//     in j order and the valid tiles are a prefix of the sequence. A warpgroup whose tile is past
//     the end passes the turn on once (unless the other has already stopped) and stops.
// Measured (docs/perf.md, "Pingpong consumer warpgroups"): 0.78-0.90x kWgmma; without the turns
// (PDS_PREFILL_PP_FREE=1, a diagnostic) 0.93-0.97x: one warpgroup's k-loop, dequantisation then
// wgmma, does not fill the tensor pipe alone. Opt-in.
// Rows of a box past the tile read the next expert's rows (or zeros past `capacity`); a token
// column of B only reaches the same column of the accumulators, which neither epilogue stores.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdlib>

#include "common/cuda_check.h"
#include "common/pdl_bulk.cuh"
#include "common/tensor_map.h"
#include "moe/moe_prefill.h"
#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_internal.h"
#include "moe/moe_prefill_schedule.h"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

namespace {

using pdl_bulk::mbar_init;
using pdl_bulk::smem_u32;

constexpr int kThreads = 256;       // two consumer warpgroups
constexpr int kChunk = 128;         // inputs per ring slot
constexpr int kTokTile = 128;       // tokens of one expert a tile
constexpr int kOutGated = 64;       // gate (and as many up) outputs a warpgroup tile
constexpr int kOutDown = 128;       // down outputs a warpgroup tile
constexpr int kStages = 3;          // ring slots a warpgroup
constexpr int kAhead = 2;           // chunks in flight ahead of the MMAs
constexpr int kHalfBytes = kTokTile * 128;  // 64 inputs x the tokens
constexpr int kStageBytes = 2 * kHalfBytes;
constexpr int kBoxRows = 32;
constexpr int kBoxBytes = kBoxRows * 128;
constexpr int kStageRow = kOutGated * 2 + 16;  // bf16 staging row (bytes): 64 outputs + 16 bytes of padding
constexpr int kWgBytes = kStages * kStageBytes;  // a warpgroup's ring
constexpr size_t kSmem = size_t(2) * kWgBytes + 1024;
static_assert(kTokTile * kStageRow <= kStageBytes, "the gate/up staging fits in one ring slot");
static_assert(kSmem <= 227 * 1024, "shared memory a CTA");
constexpr int kTurnBar = 1;   // named barriers 1, 2: warpgroup w's turn to run its k-loop
constexpr int kLocalBar = 3;  // named barriers 3, 4: warpgroup w alone

__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }

// mbarrier.arrive under a predicate, not a branch: a conditional arrive inside the k-loop's open
// wgmma window made ptxas 13.0 serialise every wgmma (C7513).
__device__ __forceinline__ void mbar_arrive_if(uint32_t addr, bool p) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %1, 0;\n @q mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(addr), "r"(int(p)) : "memory");
}

// The ring's barriers by shared address (32-bit registers, not generic pointers: fewer registers
// in the k-loop, where the down kernels sit at 255).
__device__ __forceinline__ void bar_arrive(uint32_t addr) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory"); }
__device__ __forceinline__ void bar_expect(uint32_t addr, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(addr), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint32_t addr, unsigned parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(addr), "r"(parity)
                 : "memory");
}

struct Ring {
  uint32_t bars;  // shared address of full[0]; full[s] at + 8 s, empty[s] at + 8 (kStages + s)
  uint32_t base;  // shared address of slot 0 (1024-aligned)
  __device__ uint32_t full(uint32_t s) const { return bars + 8 * s; }
  __device__ uint32_t empty(uint32_t s) const { return bars + 8 * (kStages + s); }
};

__device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap* map, int col, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

// The warpgroup's first thread: chunk c of a tile (rows tok0 .., nbox boxes of 32) as the
// warpgroup's n-th fill, once every thread of the warpgroup released the fill before it in the slot.
__device__ __forceinline__ void issue_chunk(const CUtensorMap* map, const Ring& r, uint32_t n, int c, int tok0, int nbox) {
  const uint32_t slot = n % kStages;
  if (n >= kStages) bar_wait(r.empty(slot), ((n / kStages) - 1) & 1);
  bar_expect(r.full(slot), nbox * kBoxBytes * 2);
  const uint32_t dst = r.base + slot * kStageBytes;
  for (int h = 0; h < 2; ++h)
    for (int b = 0; b < nbox; ++b) tma_box(dst + h * kHalfBytes + b * kBoxBytes, map, c * kChunk + 64 * h, tok0 + kBoxRows * b, r.full(slot));
}

// Tile id -> coordinates (kTokTile token tiles, out_tiles output tiles an expert).
__device__ __forceinline__ Tile tile_of(int tile, const int* tile_start, int experts, const int32_t* __restrict__ offsets) {
  const int e = expert_of_tile(tile_start, experts, tile), local = tile - tile_start[e];
  const int row_begin = offsets[e], nrows = offsets[e + 1] - row_begin;
  const int mtiles = (nrows + kTokTile - 1) / kTokTile;
  int ot, mt;
  prefill_tile_coords(local, mtiles, &ot, &mt);
  return Tile{e, ot, row_begin + mt * kTokTile, min(kTokTile, nrows - mt * kTokTile)};
}

struct Sched {
  const int* tile_start;
  int experts, total;
  const int32_t* offsets;
  int* next;    // shared: the warpgroup's claimed next tile (one word a warpgroup)
  bool ordered;  // k-loops in turns (the form); false: the diagnostic PDS_PREFILL_PP_FREE=1, no turns
  TileQueue* queue;  // null: static stride
};

// One tile of warpgroup wg: its k-loop (its turn already taken), then: pass the turn, drain,
// publish the claimed next tile, issue the next tile's first chunks, epilogue. Returns the next tile.
template <bool kGated, bool kWide, int kN>
__device__ __forceinline__ int run_tile(const Mxfp4Decode& a, const Mxfp4Decode& b, const CUtensorMap* map, uint16_t* __restrict__ act_out,
                                        float* __restrict__ out, const MoeAct& fn, uint8_t* staging, const Ring& ring, uint32_t& seq,
                                        const Tile& tl, int tile, const Sched& sc, bool wait_turn) {
  constexpr int kOut = kGated ? kOutGated : kOutDown;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const bool lead = wtid == 0;
  const int rows = static_cast<int>(a.rows), cols = static_cast<int>(a.cols), chunks = cols / kChunk, rtiles = rows / 8;
  const int r0 = tl.ot * kOut;
  const int r1 = kGated ? r0 : r0 + 64;
  const Mxfp4Decode& m1 = kGated ? b : a;

  const int64_t tile_bytes = int64_t(chunks) * 512;
  const int64_t t0 = int64_t(tl.e) * rtiles + r0 / 8 + 2 * warp, t1 = int64_t(tl.e) * rtiles + r1 / 8 + 2 * warp;
  const uint8_t* pa = a.packed + t0 * tile_bytes + lane * 16;
  const uint8_t* pb = m1.packed + t1 * tile_bytes + lane * 16;
  const uint8_t* sa = a.scales + t0 * chunks * 32 + g * 4;
  const uint8_t* sb = m1.scales + t1 * chunks * 32 + g * 4;
  auto load_w = [&](int c, uint4 (&q)[4], uint32_t (&s)[4]) {
    q[0] = __ldg(reinterpret_cast<const uint4*>(pa + c * 512));
    q[1] = __ldg(reinterpret_cast<const uint4*>(pa + tile_bytes + c * 512));
    s[0] = __ldg(reinterpret_cast<const uint32_t*>(sa + c * 32));
    s[1] = __ldg(reinterpret_cast<const uint32_t*>(sa + chunks * 32 + c * 32));
    q[2] = __ldg(reinterpret_cast<const uint4*>(pb + c * 512));
    q[3] = __ldg(reinterpret_cast<const uint4*>(pb + tile_bytes + c * 512));
    s[2] = __ldg(reinterpret_cast<const uint32_t*>(sb + c * 32));
    s[3] = __ldg(reinterpret_cast<const uint32_t*>(sb + chunks * 32 + c * 32));
  };

  float acc0[kN / 2], acc1[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc0[i] = 0.0f, acc1[i] = 0.0f;

  uint4 qn[4];
  uint32_t sn[4];
  load_w(0, qn, sn);  // before the turn: the first words' latency is not a bubble of the tensor pipe
  if (wait_turn) named_sync(kTurnBar + wg, kThreads);  // the other warpgroup issued tile j - 1's last MMA
  // Claim this warpgroup's next tile (j + 2) now, in its turn: the claims stay in j order (the
  // atomic's latency hides behind the k-loop).
  int claimed = 0;
  if (lead) claimed = sc.queue ? int(gridDim.x + atomicAdd(&sc.queue->next, 1u)) : tile + 2 * int(gridDim.x);
  for (int c = 0; c < chunks; ++c) {
    const uint32_t n = seq + c, slot = n % kStages;
    bar_wait(ring.full(slot), (n / kStages) & 1);
    uint4 q[4];
    uint32_t scl[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = qn[j], scl[j] = sn[j];
    if (c + 1 < chunks) load_w(c + 1, qn, sn);  // a chunk ahead, in registers
    const uint32_t sbase = ring.base + slot * kStageBytes;
#pragma unroll
    for (int s = 0; s < 8; ++s) {  // k-step s: group i = s / 2, half h = s % 2
      const int i = s >> 1, h = s & 1;
      uint32_t fa[4], fb[4];
      {
        uint32_t lo[2], hi[2];
        dequant_half<kWide>(word_of(q[0], i), (scl[0] >> (8 * i)) & 0xffu, h, lo);
        dequant_half<kWide>(word_of(q[1], i), (scl[1] >> (8 * i)) & 0xffu, h, hi);
        fa[0] = lo[0], fa[1] = hi[0], fa[2] = lo[1], fa[3] = hi[1];
        dequant_half<kWide>(word_of(q[2], i), (scl[2] >> (8 * i)) & 0xffu, h, lo);
        dequant_half<kWide>(word_of(q[3], i), (scl[3] >> (8 * i)) & 0xffu, h, hi);
        fb[0] = lo[0], fb[1] = hi[0], fb[2] = lo[1], fb[3] = hi[1];
      }
      const uint64_t desc = sw128_desc(sbase + (s >> 2) * kHalfBytes + (s & 3) * 32);
      wgmma_fence();
      wgmma_rs<kN>(acc0, fa, desc);
      wgmma_rs<kN>(acc1, fb, desc);
      wgmma_commit();
      wgmma_wait<1>();  // k-step s - 1 is done: its A registers are free
      // The previous chunk's wgmmas are all done: its slot is released (k-step 0) and refilled with
      // chunk c + 2 (k-step 1; issued at k-step 0, right after the arrive, ptxas serialised the wgmmas).
      if (s == 0) mbar_arrive_if(ring.empty((n + kStages - 1) % kStages), c > 0);
      if (s == 1) {
        if (lead && c + kAhead < chunks) issue_chunk(map, ring, n + kAhead, c + kAhead, tl.tok0, kN / kBoxRows);
        __syncwarp();
      }
    }
  }
  // The k-loop's MMAs are issued: pass the turn, drain (before any other register is written:
  // the last k-step's wgmmas still read their A registers, and ptxas would serialise every
  // wgmma otherwise, C7513), then publish the next tile and start its copies.
  if (sc.ordered) named_arrive(kTurnBar + (wg ^ 1), kThreads);
  wgmma_wait<0>();
  if (lead) sc.next[wg] = claimed;
  named_sync(kLocalBar + wg, 128);
  const int next = sc.next[wg];
  if (lead && next < sc.total) {
    const Tile nt = tile_of(next, sc.tile_start, sc.experts, sc.offsets);
    const int nbox = (nt.ntok + kBoxRows - 1) / kBoxRows;
    for (int s = 0; s < kAhead && s < chunks; ++s) issue_chunk(map, ring, seq + chunks + s, s, nt.tok0, nbox);
  }
  __syncwarp();
  const uint32_t last = (seq + chunks - 1) % kStages;  // the last chunk's slot: the gate/up staging, released after it
  seq += chunks;

  // Accumulator element 4j + v: weight row 16 warp + g + 8 (v / 2) of the block, token 8j + 2t + v % 2.
  if constexpr (kGated) {
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1), f = 16 * warp + g + 8 * (v >> 1);
        const int pos = (f & ~31) | wgmma_k_position(f & 31);
        const __nv_bfloat16 y = __float2bfloat16_rn(act_fast(fn, acc0[4 * j + v], acc1[4 * j + v]));
        *reinterpret_cast<__nv_bfloat16*>(staging + last * kStageBytes + tok * kStageRow + 2 * pos) = y;
      }
    named_sync(kLocalBar + wg, 128);
    uint16_t* dst = act_out + int64_t(tl.tok0) * rows + r0;
#pragma unroll 1
    for (int i = wtid; i < tl.ntok * 8; i += 128) {  // 8 x 16 bytes a token row
      const int tok = i >> 3, q = i & 7;
      *reinterpret_cast<uint4*>(dst + int64_t(tok) * rows + 8 * q) =
          *reinterpret_cast<const uint4*>(staging + last * kStageBytes + tok * kStageRow + 16 * q);
    }
    // The staging's generic-proxy accesses come before the bulk copies that refill the slot (the
    // next tile's chunk 2, issued by this warpgroup after this).
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    bar_arrive(ring.empty(last));
  } else {
    bar_arrive(ring.empty(last));
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1);
        if (tok >= tl.ntok) continue;
        const int f = 16 * warp + g + 8 * (v >> 1);
        float* o = out + (tl.tok0 + int64_t(tok)) * rows;
        o[r0 + f] = acc0[4 * j + v];
        o[r1 + f] = acc1[4 * j + v];
      }
  }
  return next;
}

template <bool kGated, bool kWide, bool kQueue>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_pingpong(const __grid_constant__ CUtensorMap map, Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                     uint16_t* __restrict__ act_out, float* __restrict__ out, MoeAct fn, TileQueue* queue_ptr, int ordered) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ int tile_start[kMaxExperts + 1];
  __shared__ uint64_t bars[2][2 * kStages];  // warpgroup w: full[0 .. kStages - 1], then empty
  __shared__ int next_tile[2];
  __shared__ int first_claim;
  __shared__ volatile int stopped[2];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  constexpr int kOut = kGated ? kOutGated : kOutDown;
  const int wg = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    for (int w = 0; w < 2; ++w)
      for (int s = 0; s < kStages; ++s) {
        mbar_init(&bars[w][s], 1);
        mbar_init(&bars[w][kStages + s], 128);
      }
    pdl_bulk::mbar_init_fence();
    stopped[0] = stopped[1] = 0;
    first_claim = kQueue ? int(gridDim.x + atomicAdd(&queue_ptr->next, 1u)) : int(blockIdx.x + gridDim.x);  // tile 1 (warpgroup 1)
  }
  const int out_tiles = (static_cast<int>(a.rows) + kOut - 1) / kOut;
  scan_tile_starts(offsets, experts, kTokTile, out_tiles, tile_start);
  __syncthreads();
  const Sched sc{tile_start, experts, tile_start[experts], offsets, next_tile, ordered != 0, kQueue ? queue_ptr : nullptr};
  uint8_t* wsm = smem + wg * kWgBytes;
  const Ring ring{smem_u32(&bars[wg][0]), smem_u32(wsm)};
  uint8_t* staging = wsm;  // gate/up: the staging is the ring slot of the tile's last chunk
  const bool lead = (threadIdx.x & 127) == 0;
  uint32_t seq = 0;

  int tile = wg == 0 ? int(blockIdx.x) : first_claim;
  if (lead && tile < sc.total) {  // the first tile's first chunks
    const Tile tl = tile_of(tile, tile_start, experts, offsets);
    const int nbox = (tl.ntok + kBoxRows - 1) / kBoxRows;
    const int chunks = static_cast<int>(a.cols) / kChunk;
    for (int s = 0; s < kAhead && s < chunks; ++s) issue_chunk(&map, ring, s, s, tl.tok0, nbox);
  }
  __syncwarp();
  for (int j = wg;; j += 2) {
    const bool wait_turn = sc.ordered && j >= 1;
    if (tile >= sc.total) {
      // The first past the end passes the turn on so the other can see it; the second just stops.
      if (wait_turn) named_sync(kTurnBar + wg, kThreads);  // the other warpgroup issued tile j - 1's last MMA (or stopped)
      if (sc.ordered && !stopped[wg ^ 1]) {
        stopped[wg] = 1;
        named_arrive(kTurnBar + (wg ^ 1), kThreads);
      }
      break;
    }
    const Tile tl = tile_of(tile, tile_start, experts, offsets);
    const int nv = (tl.ntok + 31) >> 5;
    if (nv <= 1) tile = run_tile<kGated, kWide, 32>(a, b, &map, act_out, out, fn, staging, ring, seq, tl, tile, sc, wait_turn);
    else if (nv == 2) tile = run_tile<kGated, kWide, 64>(a, b, &map, act_out, out, fn, staging, ring, seq, tl, tile, sc, wait_turn);
    else if (nv == 3) tile = run_tile<kGated, kWide, 96>(a, b, &map, act_out, out, fn, staging, ring, seq, tl, tile, sc, wait_turn);
    else tile = run_tile<kGated, kWide, 128>(a, b, &map, act_out, out, fn, staging, ring, seq, tl, tile, sc, wait_turn);
  }
  __syncthreads();
  if (kQueue && threadIdx.x == 0) finish_tile_queue(queue_ptr);
}

Status encode_rows_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols) {
  const uint64_t extent[2] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  const uint64_t stride[1] = {static_cast<uint64_t>(cols * 2)};
  const uint32_t box[2] = {64, static_cast<uint32_t>(kBoxRows)};
  return encode_bf16_tensor_map(map, base, 2, extent, stride, box, "moe prefill pingpong");
}

template <bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  CUtensorMap map;
  PDS_RETURN_IF_ERROR(encode_rows_map(&map, x, capacity, a.cols));
  auto kernel = queue ? prefill_pingpong<kGated, kWide, true> : prefill_pingpong<kGated, kWide, false>;
  const int64_t per_tile = kGated ? kOutGated : kOutDown;
  // Units of grid_for: CTAs; a CTA runs two warpgroup tiles at a time.
  const int64_t max_tiles = (max_output_tiles(capacity, kTokTile, experts, a.rows, per_tile) + 1) / 2;
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, kSmem, max_tiles, kThreads));
  // Diagnostic (docs/perf.md, "Pingpong consumer warpgroups"): PDS_PREFILL_PP_FREE=1 drops the turns
  // (two independent warpgroups a CTA, each with its own tiles and ring). Read once.
  static const int ordered = [] {
    const char* v = std::getenv("PDS_PREFILL_PP_FREE");
    return v && v[0] == '1' ? 0 : 1;
  }();
  kernel<<<grid, kThreads, kSmem, stream>>>(map, a, b, offsets, static_cast<int>(experts), act, out, fn, queue, ordered);
  return last_launch_status(kGated ? "moe_expert_mlp_prefill (wgmma pingpong) gate/up" : "moe_expert_mlp_prefill (wgmma pingpong) down");
}

}  // namespace

Status expert_mlp_prefill_wgmma_pingpong(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                         const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, cudaStream_t stream) {
  TileQueue* queue = static_cast<TileQueue*>(queue_words);
  return run_gate_up_then_down(w, x_sorted, act, out_sorted,
                               [&](auto gated, auto wide, const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* x, uint16_t* act_out,
                                   float* out, const MoeAct& fn) {
                                 return launch<decltype(gated)::value, decltype(wide)::value>(a, b, offsets, experts, capacity, x, act_out,
                                                                                              out, fn, queue, stream);
                               });
}

}  // namespace pdserve::cuda::moe_prefill_detail
