// moe_expert_mlp_prefill's producer/consumer warpgroup form (MoePrefillKernel::kWgmmaProducer;
// contract: moe_prefill.h, design: docs/design.md). The register-A loops (kWgmma and its
// relatives) dequantise the MXFP4 weights on the same warps that issue the wgmmas, once per
// token tile of at most 128, so a 146-row expert pays the dequantisation twice (128 + an
// N = 32 tail) and the ALU work competes with the MMAs for the schedulers. Here:
//   - Warpgroup 0 (the producer) dequantises each 64-input chunk of a 128-row weight tile ONCE
//     into shared memory as bf16 (K-major, 128-byte swizzle, inputs in wgmma_k_position order
//     like the tokens), and thread 0 brings the chunk's token rows by bulk tensor copies.
//   - Warpgroups 1 and 2 (the consumers) run wgmma with both operands in shared memory; both
//     read the same weight tile and take different token halves (rows 0..127 and 128..255 of
//     a tile of up to 256 tokens), so one dequantisation serves up to 256 tokens and a
//     146-row expert is one tile (consumer 1 runs N = 32 on its 18 rows).
//   - A 4-stage ring with a full mbarrier (128 producer arrivals + thread 0's expected bytes)
//     and an empty one (256 consumer arrivals) a stage; the tile sequence (static stride or
//     the caller's queue) goes from producer thread 0 to everyone through a 2-slot mailbox
//     with its own barriers, so the producer runs ahead into the next tile while the
//     consumers store the last one's outputs straight from registers (no staging).
// Gate/up tiles are 64 gate rows (block 0) + the same 64 rows of up (block 1), so a consumer
// thread holds gate and up of the same (row, token) and applies the activation in registers.
// Down tiles are 128 rows of w2. Rows past a tile's tokens are the next expert's rows or the
// copy engine's zero fill past `capacity`; a token column only reaches its own accumulator
// column, which the epilogue skips.
#include <cuda.h>
#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "common/pdl_bulk.cuh"
#include "common/tensor_map.h"
#include "moe/moe_prefill.h"
#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_internal.h"
#include "moe/moe_prefill_schedule.h"
#include "moe/moe_prefill_wgmma.cuh"
#include "moe/moe_prefill_wgmma_ss.cuh"

namespace pdserve::cuda::moe_prefill_detail {

namespace {

using pdl_bulk::mbar_arrive;
using pdl_bulk::mbar_arrive_expect_tx;
using pdl_bulk::mbar_init;
using pdl_bulk::mbar_wait;
using pdl_bulk::smem_u32;

constexpr int kProducers = 128;           // warpgroup 0
constexpr int kConsumers = 256;           // warpgroups 1 and 2
constexpr int kThreads = kProducers + kConsumers;
constexpr int kChunk = 64;                // inputs a stage: one 128-byte swizzle row
constexpr int kTokTile = 256;             // tokens a tile, 128 a consumer
constexpr int kTokHalf = 128;
constexpr int kOutGated = 64;             // gate (and as many up) rows a tile
constexpr int kOutDown = 128;             // down rows a tile
constexpr int kStages = 4;
constexpr int kBlockBytes = 64 * 128;     // one m64 block of A: 64 rows x 64 inputs
constexpr int kABytes = 2 * kBlockBytes;  // the tile's two m64 blocks
constexpr int kBBytes = kTokTile * 128;
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kBoxRows = 32;              // a tensor-map box: 64 inputs x 32 rows = 4 KB
constexpr int kBoxBytes = kBoxRows * 128;
constexpr int kSlots = 2;                 // tile mailbox slots
constexpr size_t kSmem = size_t(kStages) * kStageBytes + 1024;  // + the 1024-byte alignment of the swizzle atoms
static_assert(kSmem <= 227 * 1024, "shared memory a CTA");

struct Sync {
  uint64_t full[kStages], empty[kStages];
  uint64_t tile_full[kSlots], tile_empty[kSlots];
  int tile_id[kSlots];
};

struct Ctx {
  const int32_t* offsets;
  const int* tile_start;
  int experts, total;
  Sync* sync;
  uint32_t ring;  // shared address of stage 0 (1024-aligned)
  uint8_t* smem;  // the same, generic
};

__device__ __forceinline__ Tile tile_at(const Ctx& x, int tile) {
  const int e = expert_of_tile(x.tile_start, x.experts, tile), local = tile - x.tile_start[e];
  const int row_begin = x.offsets[e], nrows = x.offsets[e + 1] - row_begin;
  const int mtiles = (nrows + kTokTile - 1) / kTokTile;
  int ot, mt;
  prefill_tile_coords(local, mtiles, &ot, &mt);
  return Tile{e, ot, row_begin + mt * kTokTile, min(kTokTile, nrows - mt * kTokTile)};
}

// The mailbox: producer thread 0 posts tile `it`'s id; every other thread reads it once.
__device__ __forceinline__ int read_tile(Sync& s, int it) {
  const int slot = it % kSlots;
  mbar_wait(&s.tile_full[slot], (it / kSlots) & 1);
  const int id = *static_cast<volatile int*>(&s.tile_id[slot]);
  if (threadIdx.x != 0) mbar_arrive(&s.tile_empty[slot]);
  return id;
}

__device__ __forceinline__ void l2_prefetch(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

__device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
}

// Warpgroup 0. Thread (warp w, lane (g, t)) dequantises lane (g, t) of the decode-layout
// 8-row tiles w, w + 4 (block 0) and w + 8, w + 12 (block 1) of each chunk: row 8 tt + g of
// the stage, two 32-input groups, 8 bf16x2 words a tile, conflict-free in the swizzle.
template <bool kGated, bool kWide>
__device__ void produce(const Mxfp4Decode& a, const Mxfp4Decode& b, const CUtensorMap* map, const Ctx& x, TileQueue* queue) {
  Sync& s = *x.sync;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(a.rows), cols = static_cast<int>(a.cols), chunks = cols / kChunk, chunks128 = cols / 128;
  const int rtiles = rows / 8;
  const int64_t tile_bytes = int64_t(chunks128) * 512, scale_bytes = int64_t(chunks128) * 32;
  uint32_t seq = 0;
  int next = blockIdx.x;  // thread 0: the tile to post next
  for (int it = 0;; ++it) {
    if (tid == 0) {
      const int slot = it % kSlots;
      if (it >= kSlots) mbar_wait(&s.tile_empty[slot], ((it / kSlots) - 1) & 1);
      s.tile_id[slot] = next;
      mbar_arrive(&s.tile_full[slot]);
    }
    const int cur = read_tile(s, it);
    if (cur >= x.total) break;
    if (tid == 0) next = queue ? int(gridDim.x + atomicAdd(&queue->next, 1u)) : cur + int(gridDim.x);
    const Tile tl = tile_at(x, cur);
    const int r0 = kGated ? tl.ot * kOutGated : tl.ot * kOutDown, r1 = kGated ? r0 : r0 + 64;
    const Mxfp4Decode& m1 = kGated ? b : a;
    const int64_t ta = int64_t(tl.e) * rtiles + r0 / 8 + warp, tb = int64_t(tl.e) * rtiles + r1 / 8 + warp;
    const uint8_t* pa = a.packed + ta * tile_bytes + lane * 16;
    const uint8_t* pb = m1.packed + tb * tile_bytes + lane * 16;
    const uint8_t* sa = a.scales + ta * scale_bytes + g * 4;
    const uint8_t* sb = m1.scales + tb * scale_bytes + g * 4;
    const unsigned tx = unsigned((tl.ntok + kBoxRows - 1) / kBoxRows) * kBoxBytes;
    // Item m: tile warp + 4 m (m < 2: block 0 of a, else block 1 of m1), its two groups of the chunk.
    auto load = [&](int c, uint2 (&q)[4], uint32_t (&sc)[4]) {
      const int off = (c >> 1) * 512 + (c & 1) * 8, soff = (c >> 1) * 32 + (c & 1) * 2;
      q[0] = __ldg(reinterpret_cast<const uint2*>(pa + off));
      q[1] = __ldg(reinterpret_cast<const uint2*>(pa + 4 * tile_bytes + off));
      q[2] = __ldg(reinterpret_cast<const uint2*>(pb + off));
      q[3] = __ldg(reinterpret_cast<const uint2*>(pb + 4 * tile_bytes + off));
      sc[0] = __ldg(reinterpret_cast<const uint16_t*>(sa + soff));
      sc[1] = __ldg(reinterpret_cast<const uint16_t*>(sa + 4 * scale_bytes + soff));
      sc[2] = __ldg(reinterpret_cast<const uint16_t*>(sb + soff));
      sc[3] = __ldg(reinterpret_cast<const uint16_t*>(sb + 4 * scale_bytes + soff));
    };
    uint2 qn[4];
    uint32_t sn[4];
    load(0, qn, sn);
    for (int c = 0; c < chunks; ++c) {
      const uint32_t n = seq + c, slot = n % kStages;
      uint2 q[4];
      uint32_t sc[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) q[m] = qn[m], sc[m] = sn[m];
      if (c + 1 < chunks) load(c + 1, qn, sn);
      // The register prefetch is one chunk (~0.3 us) ahead, short of a DRAM miss: ask L2 for
      // the 512-byte decode-layout column two 128-input chunks ahead (one lane a 128-byte line).
      if ((c & 1) == 0 && c + 4 < chunks && (lane & 7) == 0) {
        const int off = ((c >> 1) + 2) * 512;
        l2_prefetch(pa + off), l2_prefetch(pa + 4 * tile_bytes + off), l2_prefetch(pb + off), l2_prefetch(pb + 4 * tile_bytes + off);
      }
      if (n >= kStages) mbar_wait(&s.empty[slot], ((n / kStages) - 1) & 1);
      if (tid == 0) {
        mbar_arrive_expect_tx(&s.full[slot], tx);
        const uint32_t dst = x.ring + slot * kStageBytes + kABytes;
        for (int bx = 0; bx * kBoxRows < tl.ntok; ++bx) tma_box(dst + bx * kBoxBytes, map, c * kChunk, tl.tok0 + bx * kBoxRows, &s.full[slot]);
      }
      uint8_t* stage = x.smem + slot * kStageBytes;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int row = 8 * (warp + 4 * m) + g;
        uint8_t* line = stage + row * 128 + 4 * t;
#pragma unroll
        for (int ii = 0; ii < 2; ++ii) {
          const uint32_t word = ii ? q[m].y : q[m].x, scale = (sc[m] >> (8 * ii)) & 0xffu;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t o[2];
            dequant_half<kWide>(word, scale, h, o);
            // o[0]: inputs 8t + 4h + {0, 1} -> positions 16h + 2t + {0, 1}; o[1]: + 8 (wgmma_k_position).
            const int unit = 4 * ii + 2 * h;
            *reinterpret_cast<uint32_t*>(line + ((unit ^ g) << 4)) = o[0];
            *reinterpret_cast<uint32_t*>(line + (((unit + 1) ^ g) << 4)) = o[1];
          }
        }
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, visible to wgmma (async proxy)
      mbar_arrive(&s.full[slot]);
    }
    seq += chunks;
  }
  if (tid == 0 && queue) finish_tile_queue(queue);
}

// One consumer's share of a tile: tokens tok0 + 128 half .., n of them (1..128), kN = n
// rounded up to 32.
template <bool kGated, int kN>
__device__ __forceinline__ void consume_tile(const Mxfp4Decode& a, uint16_t* __restrict__ act_out, float* __restrict__ out, const MoeAct& fn,
                                             const Ctx& x, uint32_t seq, int chunks, const Tile& tl, int half, int n) {
  Sync& s = *x.sync;
  const int ctid = (threadIdx.x - kProducers) & 127, warp = ctid >> 5, lane = ctid & 31, g = lane >> 2, t = lane & 3;
  float acc0[kN / 2], acc1[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc0[i] = 0.0f, acc1[i] = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const uint32_t nn = seq + c, slot = nn % kStages;
    mbar_wait(&s.full[slot], (nn / kStages) & 1);
    const uint32_t base = x.ring + slot * kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k) {
      const uint64_t bdesc = sw128_desc(base + kABytes + half * (kTokHalf * 128) + k * 32);
      wgmma_ss<kN>(acc0, sw128_desc(base + k * 32), bdesc);
      wgmma_ss<kN>(acc1, sw128_desc(base + kBlockBytes + k * 32), bdesc);
    }
    wgmma_commit();
    wgmma_wait<1>();  // the previous chunk's wgmmas are done: its stage may be refilled
    if (c > 0) mbar_arrive(&s.empty[(nn - 1) % kStages]);
  }
  wgmma_wait<0>();
  mbar_arrive(&s.empty[(seq + chunks - 1) % kStages]);

  // Accumulator element 4j + v: row 16 warp + g + 8 (v / 2) of the block, token 8j + 2t + v % 2.
  const int rows = static_cast<int>(a.rows);
  const int64_t tok_base = tl.tok0 + int64_t(half) * kTokHalf;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int tok = 8 * j + 2 * t + (v & 1);
      if (tok >= n) continue;
      const int f = 16 * warp + g + 8 * (v >> 1);
      if constexpr (kGated) {
        const int col = tl.ot * kOutGated + f, pos = (col & ~31) | wgmma_k_position(col & 31);  // act in the down launch's B order
        act_out[(tok_base + tok) * rows + pos] = __bfloat16_as_ushort(__float2bfloat16_rn(act_fast(fn, acc0[4 * j + v], acc1[4 * j + v])));
      } else {
        float* o = out + (tok_base + tok) * rows + tl.ot * kOutDown;
        o[f] = acc0[4 * j + v];
        o[64 + f] = acc1[4 * j + v];
      }
    }
}

template <bool kGated>
__device__ void consume(const Mxfp4Decode& a, uint16_t* __restrict__ act_out, float* __restrict__ out, const MoeAct& fn, const Ctx& x) {
  Sync& s = *x.sync;
  const int half = (threadIdx.x - kProducers) >> 7;
  const int chunks = static_cast<int>(a.cols) / kChunk;
  uint32_t seq = 0;
  for (int it = 0;; ++it) {
    const int cur = read_tile(s, it);
    if (cur >= x.total) break;
    const Tile tl = tile_at(x, cur);
    const int n = min(kTokHalf, tl.ntok - half * kTokHalf), nv = (n + 31) >> 5;
    if (n <= 0) {  // no tokens for this half: only release the stages
      for (int c = 0; c < chunks; ++c) {
        const uint32_t nn = seq + c;
        mbar_wait(&s.full[nn % kStages], (nn / kStages) & 1);
        mbar_arrive(&s.empty[nn % kStages]);
      }
    } else if (nv == 1) {
      consume_tile<kGated, 32>(a, act_out, out, fn, x, seq, chunks, tl, half, n);
    } else if (nv == 2) {
      consume_tile<kGated, 64>(a, act_out, out, fn, x, seq, chunks, tl, half, n);
    } else if (nv == 3) {
      consume_tile<kGated, 96>(a, act_out, out, fn, x, seq, chunks, tl, half, n);
    } else {
      consume_tile<kGated, 128>(a, act_out, out, fn, x, seq, chunks, tl, half, n);
    }
    seq += chunks;
  }
}

template <bool kGated, bool kWide>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_producer(const __grid_constant__ CUtensorMap map, Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                     uint16_t* __restrict__ act_out, float* __restrict__ out, MoeAct fn, TileQueue* queue) {  // queue: null = static stride
  extern __shared__ uint8_t smem_raw[];
  __shared__ int tile_start[kMaxExperts + 1];
  __shared__ Sync sync;
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&sync.full[i], kProducers + 1);  // every producer thread's stores + thread 0's expected bytes
      mbar_init(&sync.empty[i], kConsumers);
    }
    for (int i = 0; i < kSlots; ++i) {
      mbar_init(&sync.tile_full[i], 1);
      mbar_init(&sync.tile_empty[i], kThreads - 1);
    }
    pdl_bulk::mbar_init_fence();
  }
  const int out_tiles = static_cast<int>(a.rows) / (kGated ? kOutGated : kOutDown);  // rows % 128 == 0 (moe_prefill_fits)
  scan_tile_starts(offsets, experts, kTokTile, out_tiles, tile_start);
  __syncthreads();
  const Ctx x{offsets, tile_start, experts, tile_start[experts], &sync, smem_u32(smem), smem};
  if (threadIdx.x < kProducers) produce<kGated, kWide>(a, b, &map, x, queue);
  else consume<kGated>(a, act_out, out, fn, x);
}

template <bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* xs,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  CUtensorMap map;
  const uint64_t extent[2] = {static_cast<uint64_t>(a.cols), static_cast<uint64_t>(capacity)};
  const uint64_t stride[1] = {static_cast<uint64_t>(a.cols * 2)};
  const uint32_t box[2] = {64, static_cast<uint32_t>(kBoxRows)};
  PDS_RETURN_IF_ERROR(encode_bf16_tensor_map(&map, xs, 2, extent, stride, box, "moe prefill producer"));
  auto kernel = prefill_producer<kGated, kWide>;
  const int64_t per_tile = kGated ? kOutGated : kOutDown;
  const int64_t max_tiles = (capacity / kTokTile + experts) * (a.rows / per_tile);
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, kSmem, max_tiles, kThreads));
  kernel<<<grid, kThreads, kSmem, stream>>>(map, a, b, offsets, static_cast<int>(experts), act, out, fn, queue);
  return last_launch_status(kGated ? "moe_expert_mlp_prefill (wgmma producer) gate/up" : "moe_expert_mlp_prefill (wgmma producer) down");
}

}  // namespace

Status expert_mlp_prefill_wgmma_producer(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                         const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, cudaStream_t stream) {
  TileQueue* queue = static_cast<TileQueue*>(queue_words);
  return run_gate_up_then_down(w, x_sorted, act, out_sorted,
                               [&](auto gated, auto wide, const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* xs, uint16_t* act_out,
                                   float* out, const MoeAct& fn) {
                                 return launch<decltype(gated)::value, decltype(wide)::value>(a, b, offsets, experts, capacity, xs, act_out, out,
                                                                                              fn, queue, stream);
                               });
}

}  // namespace pdserve::cuda::moe_prefill_detail
