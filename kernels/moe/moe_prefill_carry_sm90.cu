// moe_expert_mlp_prefill's kWgmmaCarry / kWgmmaCarry6 (contract: moe_prefill.h; design:
// docs/design.md, the kWgmmaCarry paragraph; figures: docs/perf.md "Ring carried across
// tiles"). kWgmma's tiles, MMAs and k order (two warpgroups, two m64 blocks each, A = weights
// dequantised in registers, B = token tiles of 128 in order from a cp.async ring in the
// 128-byte swizzle), but the token ring runs on across the persistent tile loop: the next tile
// is known a tile ahead (tile queue or static stride), so the last kAhead chunks of a tile copy
// the next tile's first kAhead token chunks while this tile's last k-steps and its epilogue
// run, and a tile never starts on an empty ring. (The packed words are still loaded at the
// tile's start, one chunk ahead as in kWgmma.) The gate/up epilogue applies the activation in
// registers (each warpgroup holds the gate and the up rows of the same outputs) and stages
// bf16 in the ring slot of the tile's last chunk, the one slot no copy is in flight to;
// kWgmma staged fp32 gate and up across most of the ring, which would have stopped the carry.
// kWgmmaCarry: 5 ring slots (3 chunks ahead, as kWgmma); kWgmmaCarry6: 6 slots (4 ahead).
// Outputs bit-identical to kWgmma.
#include <cuda_bf16.h>

#include "mla/wgmma_bf16.cuh"
#include "moe/moe_prefill.h"
#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_internal.h"
#include "moe/moe_prefill_schedule.h"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

namespace {

constexpr int kThreads = 256;                  // two warpgroups
constexpr int kChunk = 128;                    // inputs a ring stage
constexpr int kTokTile = 128;                  // most tokens a tile (the largest wgmma N)
constexpr int kHalfBytes = kTokTile * 128;     // 64 inputs x 128 tokens: one column of swizzle atoms
constexpr int kStageBytes = 2 * kHalfBytes;    // a chunk's token tile; also the bf16 act staging (128 x 128 x 2)
template <int kStages>
constexpr size_t smem_bytes() {
  static_assert(size_t(kStages) * kStageBytes + 1024 + (kMaxExperts + 4) * 4 <= 227 * 1024, "shared memory a CTA");
  return size_t(kStages) * kStageBytes + 1024;  // + the 1024-byte alignment the swizzle atoms need
}

// This thread's weight pointers for a tile (kWgmma's layout): warp's two 8-row tiles of each
// m64 block, lane's 16 bytes; the scale word of row g. live: the warpgroup's rows are real
// (rows are a multiple of 128, so all or none).
struct TileW {
  const uint8_t *pa, *pb, *sa, *sb;
  int r0, r1;
  bool live;
};

template <bool kGated>
__device__ __forceinline__ TileW tile_weights(const Mxfp4Decode& a, const Mxfp4Decode& b, const Tile& tl) {
  constexpr int kOut = kGated ? 128 : 256;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2;
  const int rows = static_cast<int>(a.rows), chunks = static_cast<int>(a.cols) / kChunk, rtiles = rows / 8;
  const int r0 = kGated ? tl.ot * kOut + 64 * wg : tl.ot * kOut + 128 * wg;
  const int r1 = kGated ? r0 : r0 + 64;
  const Mxfp4Decode& m1 = kGated ? b : a;
  const int64_t tile_bytes = int64_t(chunks) * 512;
  const int64_t t0 = int64_t(tl.e) * rtiles + r0 / 8 + 2 * warp, t1 = int64_t(tl.e) * rtiles + r1 / 8 + 2 * warp;
  return {a.packed + t0 * tile_bytes + lane * 16, m1.packed + t1 * tile_bytes + lane * 16, a.scales + t0 * chunks * 32 + g * 4,
          m1.scales + t1 * chunks * 32 + g * 4, r0, r1, r1 + 64 <= rows};
}

// Chunk c's packed quads and scale words (two tiles a block, two blocks).
__device__ __forceinline__ void load_w(const TileW& w, int c, int chunks, uint4 (&q)[4], uint32_t (&s)[4]) {
  const int64_t tile_bytes = int64_t(chunks) * 512;
  q[0] = __ldg(reinterpret_cast<const uint4*>(w.pa + c * 512));
  q[1] = __ldg(reinterpret_cast<const uint4*>(w.pa + tile_bytes + c * 512));
  s[0] = __ldg(reinterpret_cast<const uint32_t*>(w.sa + c * 32));
  s[1] = __ldg(reinterpret_cast<const uint32_t*>(w.sa + chunks * 32 + c * 32));
  q[2] = __ldg(reinterpret_cast<const uint4*>(w.pb + c * 512));
  q[3] = __ldg(reinterpret_cast<const uint4*>(w.pb + tile_bytes + c * 512));
  s[2] = __ldg(reinterpret_cast<const uint32_t*>(w.sb + c * 32));
  s[3] = __ldg(reinterpret_cast<const uint32_t*>(w.sb + chunks * 32 + c * 32));
}

// Token rows [0, n) of tile t's chunk c into `slot` (rows past t.ntok zero-filled): 16-byte
// piece p of row r to half p / 8, row r's 128-byte line, slot (p % 8) ^ (r % 8).
__device__ __forceinline__ void load_x(const uint16_t* __restrict__ x, int cols, uint32_t smem_base, const Tile& t, int n, int c, int slot) {
  const int tid = threadIdx.x, piece = tid & 15, xr0 = tid >> 4;
  const uint32_t base = smem_base + slot * kStageBytes + (piece >> 3) * kHalfBytes;
  const uint16_t* xp = x + int64_t(t.tok0) * cols + piece * 8 + c * kChunk;
#pragma unroll
  for (int k = 0; k < kTokTile / 16; ++k) {
    const int r = xr0 + 16 * k;
    if (r < n) {
      const bool ok = r < t.ntok;
      cp_async16(base + r * 128 + (((piece & 7) ^ (r & 7)) << 4), xp + (ok ? int64_t(r) * cols : 0), ok ? 16u : 0u);
    }
  }
}

// Ring position carried from tile to tile: chunk c of the tile runs in slot (base + c) % kStages.
// primed: this tile's first kAhead token chunks' copies are in flight. nts: the next tile (ntok 0: none, or not carried), in shared memory
// (written by thread 0 before this tile's first barrier; read only where needed, which keeps it
// out of the registers the accumulators need).
template <int kStages, bool kGated, bool kWide, int kN>
__device__ __forceinline__ void run_tile(const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* __restrict__ x,
                                         uint16_t* __restrict__ act_out, float* __restrict__ out, const MoeAct& fn, uint8_t* smem,
                                         const Tile& tl, const Tile* nts, int base, bool primed) {
  constexpr int kAhead = kStages - 2;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(a.rows), cols = static_cast<int>(a.cols), chunks = cols / kChunk;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const TileW w = tile_weights<kGated>(a, b, tl);

  float acc0[kN / 2], acc1[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc0[i] = acc1[i] = 0.0f;

  if (!primed) {
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
      if (s < chunks) load_x(x, cols, smem_base, tl, kN, s, (base + s) % kStages);
      cp_async_commit();
    }
  }
  uint4 qn[4];
  uint32_t sn[4];
  if (w.live) load_w(w, 0, chunks, qn, sn);
  uint4 q[4];
  uint32_t sc[4];
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kAhead - 1>();
    wgmma::fence_proxy_async();  // the cp.async writes (generic proxy) become visible to wgmma (async proxy)
    __syncthreads();
    // Slot (base + c + kAhead) % kStages was last read by chunk c - 2 of this stream (this
    // tile's or the last one's), finished by every warpgroup before this barrier.
    const int ahead = c + kAhead;
    if (ahead < chunks) load_x(x, cols, smem_base, tl, kN, ahead, (base + ahead) % kStages);
    else if (const Tile nt = *nts; nt.ntok > 0) load_x(x, cols, smem_base, nt, (nt.ntok + 31) & ~31, ahead - chunks, (base + ahead) % kStages);
    cp_async_commit();
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = qn[j], sc[j] = sn[j];
    if (c + 1 < chunks && w.live) load_w(w, c + 1, chunks, qn, sn);  // a chunk ahead, in registers
    if (!w.live) continue;
    const uint32_t slot = smem_base + ((base + c) % kStages) * kStageBytes;
#pragma unroll
    for (int s = 0; s < 8; ++s) {  // k-step s: group i = s / 2, half h = s % 2
      const int i = s >> 1, h = s & 1;
      uint32_t lo[2], hi[2], fa[4], fb[4];
      dequant_half<kWide>(word_of(q[0], i), (sc[0] >> (8 * i)) & 0xffu, h, lo);
      dequant_half<kWide>(word_of(q[1], i), (sc[1] >> (8 * i)) & 0xffu, h, hi);
      fa[0] = lo[0], fa[1] = hi[0], fa[2] = lo[1], fa[3] = hi[1];
      dequant_half<kWide>(word_of(q[2], i), (sc[2] >> (8 * i)) & 0xffu, h, lo);
      dequant_half<kWide>(word_of(q[3], i), (sc[3] >> (8 * i)) & 0xffu, h, hi);
      fb[0] = lo[0], fb[1] = hi[0], fb[2] = lo[1], fb[3] = hi[1];
      wgmma_fence();
      const uint64_t desc = sw128_desc(slot + (s >> 2) * kHalfBytes + (s & 3) * 32);
      wgmma_rs<kN>(acc0, fa, desc);
      wgmma_rs<kN>(acc1, fb, desc);
      wgmma_commit();
      wgmma_wait<1>();  // k-step s - 1 is done: its A registers are free
    }
  }
  wgmma_wait<0>();
  // (The next tile's first packed words are not carried: loaded into registers here, or
  // prefetched into L2 here, ptxas serialised the wgmmas (C7515); loaded in the last chunk, the
  // next tile's pointers stayed live across the k-steps: ~0.9 KB of spills in gate/up.)

  // Accumulator element 4j + v: weight row 16 warp + g + 8 (v / 2) of the block, token 8j + 2t + v % 2.
  if constexpr (kGated) {
    __syncthreads();  // every warpgroup's wgmmas are done with the last chunk's slot: the staging
    // act (bf16) in wgmma_k_position order (the down launch's B), row tok of 256 bytes, 16-byte
    // unit u at u ^ (tok % 8): tok % 8 does not change with j, so each thread's 64 addresses are
    // four bases + immediates (a key that did left ptxas 64 live addresses and ~1 KB of spills).
    // No copy is in flight to this slot; the next one to it is issued after the next tile's
    // chunk-1 barrier.
    uint8_t* stg = smem + ((base + chunks - 1) % kStages) * kStageBytes;
    auto stage = [&](const MoeAct& f_act) {
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int tok = 8 * j + 2 * t + (v & 1), f = 64 * wg + 16 * warp + g + 8 * (v >> 1);
          const int pos = (f & ~31) | wgmma_k_position(f & 31);
          const __nv_bfloat16 h = __float2bfloat16_rn(act_fast(f_act, acc0[4 * j + v], acc1[4 * j + v]));
          *reinterpret_cast<__nv_bfloat16*>(stg + tok * 256 + (((pos >> 3) ^ (tok & 7)) << 4) + (pos & 7) * 2) = h;
        }
    };
    // One branch on the activation for the whole tile, not one an element (act_fast's).
    if (fn.kind == MoeActivation::kSiLU) stage(MoeAct{MoeActivation::kSiLU, fn.beta, fn.linear_beta});
    else stage(fn);
    __syncthreads();
    uint16_t* dst = act_out + int64_t(tl.tok0) * rows + tl.ot * 128;
#pragma unroll 1
    for (int i = tid; i < tl.ntok * 16; i += kThreads) {
      const int tok = i >> 4, u = i & 15;
      *reinterpret_cast<uint4*>(dst + int64_t(tok) * rows + u * 8) = *reinterpret_cast<const uint4*>(stg + tok * 256 + ((u ^ (tok & 7)) << 4));
    }
  } else {
    if (!w.live) return;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1);
        if (tok >= tl.ntok) continue;
        const int f = 16 * warp + g + 8 * (v >> 1);
        float* o = out + (tl.tok0 + int64_t(tok)) * rows;
        o[w.r0 + f] = acc0[4 * j + v];
        o[w.r1 + f] = acc1[4 * j + v];
      }
  }
}

// Tile `tile` of the launch: token tiles of 128 in order within each expert.
__device__ __forceinline__ Tile tile_at(const int* tile_start, const int32_t* __restrict__ offsets, int experts, int tile) {
  const int e = expert_of_tile(tile_start, experts, tile), local = tile - tile_start[e];
  const int row_begin = offsets[e], nrows = offsets[e + 1] - row_begin;
  const int mtiles = (nrows + kTokTile - 1) / kTokTile;
  int ot, mt;
  prefill_tile_coords(local, mtiles, &ot, &mt);
  return Tile{e, ot, row_begin + mt * kTokTile, min(kTokTile, nrows - mt * kTokTile)};
}

template <int kStages, bool kGated, bool kWide, bool kQueue>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_carry(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts, const uint16_t* __restrict__ x,
                  uint16_t* __restrict__ act_out, float* __restrict__ out, MoeAct fn, TileQueue* queue_ptr) {  // queue_ptr: null unless kQueue
  extern __shared__ uint8_t smem_raw[];
  __shared__ int tile_start[kMaxExperts + 1];
  // Tiles of iterations it, it + 1, it + 2 in slots it % 3 ..: iteration it runs the first,
  // carries into the second, and thread 0 fetches the third (so the queue is claimed two tiles
  // ahead; a one-ahead claim published mid-tile, with the next tile's coordinates recomputed
  // in each of the last kAhead chunks, measured slower: docs/perf.md "Ring carried across tiles"). Slot (it + 2) % 3 was last read
  // at iteration it - 1's start, before that tile's chunk barriers.
  __shared__ int tile_of[3];
  __shared__ Tile next_tile[2];  // iteration it's next tile in slot it % 2 (thread 0), rewritten two iterations later
  uint8_t* smem = smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  constexpr int kOut = kGated ? 128 : 256, kAhead = kStages - 2;
  const int out_tiles = (static_cast<int>(a.rows) + kOut - 1) / kOut;
  scan_tile_starts(offsets, experts, kTokTile, out_tiles, tile_start);
  __syncthreads();
  const int total = tile_start[experts];
  if (threadIdx.x == 0) {
    tile_of[0] = blockIdx.x;
    if (int(blockIdx.x) < total) tile_of[1] = kQueue ? int(gridDim.x + atomicAdd(&queue_ptr->next, 1u)) : int(blockIdx.x + gridDim.x);
  }
  __syncthreads();
  const int chunks = static_cast<int>(a.cols) / kChunk;
  const bool carry = chunks >= kAhead;  // else each tile fills its own ring (the next tile's chunks would be two tiles ahead)
  bool primed = false;
  for (int it = 0, base = 0;; ++it, base += chunks) {
    const int tile = tile_of[it % 3];
    if (tile >= total) break;
    const int nxt = tile_of[(it + 1) % 3];
    if (threadIdx.x == 0)
      tile_of[(it + 2) % 3] = nxt >= total ? total : kQueue ? int(gridDim.x + atomicAdd(&queue_ptr->next, 1u)) : nxt + int(gridDim.x);
    if (threadIdx.x == 0) next_tile[it & 1] = carry && nxt < total ? tile_at(tile_start, offsets, experts, nxt) : Tile{0, 0, 0, 0};
    const Tile tl = tile_at(tile_start, offsets, experts, tile);
    const Tile* nt = &next_tile[it & 1];
    const int nv = (tl.ntok + 31) >> 5;
    if (nv <= 1) run_tile<kStages, kGated, kWide, 32>(a, b, x, act_out, out, fn, smem, tl, nt, base, primed);
    else if (nv == 2) run_tile<kStages, kGated, kWide, 64>(a, b, x, act_out, out, fn, smem, tl, nt, base, primed);
    else if (nv == 3) run_tile<kStages, kGated, kWide, 96>(a, b, x, act_out, out, fn, smem, tl, nt, base, primed);
    else run_tile<kStages, kGated, kWide, 128>(a, b, x, act_out, out, fn, smem, tl, nt, base, primed);
    primed = nt->ntok > 0;  // after the tile's barriers
  }
  if (kQueue && threadIdx.x == 0) finish_tile_queue(queue_ptr);
}

template <int kStages, bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  auto kernel = queue ? prefill_carry<kStages, kGated, kWide, true> : prefill_carry<kStages, kGated, kWide, false>;
  const int64_t per_tile = kGated ? 128 : 256;
  const int64_t max_tiles = max_output_tiles(capacity, kTokTile, experts, a.rows, per_tile);
  constexpr size_t kSmem = smem_bytes<kStages>();
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, kSmem, max_tiles, kThreads));
  kernel<<<grid, kThreads, kSmem, stream>>>(a, b, offsets, static_cast<int>(experts), x, act, out, fn, queue);
  return last_launch_status(kGated ? "moe_expert_mlp_prefill (wgmma carry) gate/up" : "moe_expert_mlp_prefill (wgmma carry) down");
}

template <int kStages>
Status run_both(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x_sorted,
                uint16_t* act, float* out_sorted, TileQueue* queue, cudaStream_t stream) {
  return run_gate_up_then_down(
      w, x_sorted, act, out_sorted,
      [&](auto gated, auto wide, const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* x, uint16_t* act_out, float* out,
          const MoeAct& fn) {
        return launch<kStages, decltype(gated)::value, decltype(wide)::value>(a, b, offsets, experts, capacity, x, act_out, out, fn, queue,
                                                                             stream);
      });
}

}  // namespace

Status expert_mlp_prefill_wgmma_carry(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                      const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, MoePrefillKernel kernel,
                                      cudaStream_t stream) {
  TileQueue* queue = static_cast<TileQueue*>(queue_words);
  if (kernel == MoePrefillKernel::kWgmmaCarry6) return run_both<6>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
  return run_both<5>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
}

}  // namespace pdserve::cuda::moe_prefill_detail
