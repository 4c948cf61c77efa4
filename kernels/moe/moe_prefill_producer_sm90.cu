// moe_expert_mlp_prefill's producer/consumer warpgroup form (MoePrefillKernel::kWgmmaProducer;
// contract: moe_prefill.h, design: docs/design.md). The register-A loops (kWgmma and its
// relatives) dequantise the MXFP4 weights on the same warps that issue the wgmmas, once per
// token tile of at most 128, so a 146-row expert pays the dequantisation twice (128 + an
// N = 32 tail) and the ALU work competes with the MMAs for the schedulers. Here:
//   - Warpgroup 0 (the producer) dequantises each 64-input chunk of a 128-row weight tile ONCE
//     into shared memory as bf16 (K-major, 128-byte swizzle, inputs in wgmma_k_position order
//     like the tokens), and thread 0 brings the chunk's token rows by bulk tensor copies. The
//     packed weights come by bulk tensor copies too (warp 0 lane 0, a 3-stage ring of
//     128-input chunks, up to 3 chunks ahead and into the next tile), so the producer reads
//     them from shared memory and has no global load in flight at its proxy fence.
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
// The packed-weight ring: one 128-input chunk of the tile's 16 decode-layout 8-row tiles a
// stage (16 x 512 bytes of E2M1 nibbles, then 16 x 32 scale bytes), filled by bulk copies.
constexpr int kWStages = 3;
constexpr int kWTileBytes = 512, kWScaleBytes = 32;
constexpr int kWStageBytes = 16 * (kWTileBytes + kWScaleBytes);
constexpr size_t kSmem = size_t(kStages) * kStageBytes + size_t(kWStages) * kWStageBytes + 1024;  // + the 1024-byte alignment of the swizzle atoms
static_assert(kSmem + (kMaxExperts + 1) * 4 + 256 <= 227 * 1024, "shared memory a CTA (dynamic + tile_start + barriers)");

struct Sync {
  uint64_t full[kStages], empty[kStages];
  uint64_t wfull[kWStages], wempty[kWStages];  // the packed-weight ring
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
  uint8_t* wsmem;  // the packed-weight ring (after the bf16 ring)
  uint32_t wring;  // the same, shared address
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

__device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
}

// The packed weights as bulk-tensor sources: for a and for m1 (= a in the down launch), the
// nibbles as [row tiles][chunks128 x 128 words] and the scales as [row tiles][chunks128 x 8
// words], one box = 8 row tiles of one 128-input chunk (4096 / 256 bytes).
struct WeightMaps {
  CUtensorMap packed_a, scales_a, packed_m1, scales_m1;
};

// Warp 0 lane 0 of the producer: one 128-input chunk of the tile's 16 decode-layout 8-row
// tiles (rows r0.. of `a` -> tiles 0..7, rows r1.. of `m1` -> tiles 8..15) by four bulk tensor
// copies into a packed stage: 16 x 512 bytes of nibbles, then 16 x 32 scale bytes.
template <bool kGated>
__device__ __forceinline__ void issue_weights(const WeightMaps& w, int rtiles, const Tile& tl, int cc, uint32_t stage, uint64_t* bar) {
  const int r0 = kGated ? tl.ot * kOutGated : tl.ot * kOutDown, r1 = kGated ? r0 : r0 + 64;
  const int ta = tl.e * rtiles + r0 / 8, tb = tl.e * rtiles + r1 / 8;
  mbar_arrive_expect_tx(bar, kWStageBytes);
  tma_box(stage, &w.packed_a, cc * 128, ta, bar);
  tma_box(stage + 8 * kWTileBytes, &w.packed_m1, cc * 128, tb, bar);
  tma_box(stage + 16 * kWTileBytes, &w.scales_a, cc * 8, ta, bar);
  tma_box(stage + 16 * kWTileBytes + 8 * kWScaleBytes, &w.scales_m1, cc * 8, tb, bar);
}

// Warpgroup 0. Per 128-input chunk, producer thread p takes row p of the weight tile (rows
// 0..63: block 0, 64..127: block 1): its 64 packed bytes (4 x 16, the decode layout's lanes
// 4g + t of its 8-row tile, word `group` of each) and 4 scale bytes from the packed ring,
// and writes the row's 2 x 8 swizzle units (16 bytes, STS.128) into two bf16 stages. The
// arithmetic is dequant_half's, word for word, so the output bits are kWgmma's. The packed
// ring is filled by warp 0 (issue_weights) up to kWStages chunks ahead, across into the next
// tile, so no global load is outstanding when the stage's proxy fence runs.
template <bool kGated, bool kWide>
__device__ void produce(const Mxfp4Decode& a, const CUtensorMap* map, const WeightMaps& wm, const Ctx& x, TileQueue* queue) {
  Sync& s = *x.sync;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int cols = static_cast<int>(a.cols), chunks = cols / kChunk, chunks128 = cols / 128;
  const int rtiles = static_cast<int>(a.rows) / 8;
  // Lanes read their row's four 16-byte parts rotated by (lane / 2) % 4: the 8 lanes of a
  // shared-memory phase then hit 8 different 16-byte bank groups.
  const int rot = (lane >> 1) & 3;
  const uint8_t* my_row = x.wsmem + tid * 64;
  uint32_t seq = 0, wseq = 0;
  int next = blockIdx.x;  // thread 0: the tile to post next
  // Warp 0's issue state (the same in every lane): the tile it is issuing, its next chunk, and
  // the packed-ring sequence number of that chunk.
  int iss_id = -1, iss_cc = 0;
  uint32_t iss_seq = 0;
  Tile iss_tl{0, 0, 0, 0};
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
    const int nxt = __shfl_sync(0xffffffffu, next, 0);  // warp 0 only uses it
    if (warp == 0 && iss_id != cur) iss_id = cur, iss_tl = tl, iss_cc = 0;
    // Warp 0: keep the packed ring full up to `target`, into the next tile (never further:
    // only this tile's successor is known).
    auto top_up = [&](uint32_t target) {
      while (iss_seq < target) {
        if (iss_cc == chunks128) {
          if (iss_id != cur || nxt >= x.total) break;
          iss_id = nxt, iss_tl = tile_at(x, nxt), iss_cc = 0;
        }
        const uint32_t ws = iss_seq % kWStages;
        if (iss_seq >= kWStages) mbar_wait(&s.wempty[ws], ((iss_seq / kWStages) - 1) & 1);
        if (lane == 0) issue_weights<kGated>(wm, rtiles, iss_tl, iss_cc, x.wring + ws * kWStageBytes, &s.wfull[ws]);
        ++iss_cc, ++iss_seq;
      }
    };
    const unsigned tx = unsigned((tl.ntok + kBoxRows - 1) / kBoxRows) * kBoxBytes;
    for (int cc = 0; cc < chunks128; ++cc) {
      const uint32_t wn = wseq + cc, ws = wn % kWStages;
      if (warp == 0) top_up(wn + kWStages);
      mbar_wait(&s.wfull[ws], (wn / kWStages) & 1);
      const uint8_t* row = my_row + ws * kWStageBytes;
      uint4 q[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) q[j] = *reinterpret_cast<const uint4*>(row + 16 * ((j + rot) & 3));
      const uint32_t sc = *reinterpret_cast<const uint32_t*>(x.wsmem + ws * kWStageBytes + 16 * kWTileBytes + tid * 4);
      mbar_arrive(&s.wempty[ws]);
      // Undo the rotation: part t (lane 4g + t's word) into w[t].
      uint4 w[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) w[t] = (rot & 1) ? q[(t + 3) & 3] : q[t];
#pragma unroll
      for (int t = 0; t < 4; ++t) q[t] = (rot & 2) ? w[(t + 2) & 3] : w[t];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int c = 2 * cc + hh;
        const uint32_t n = seq + c, slot = n % kStages;
        if (n >= kStages) mbar_wait(&s.empty[slot], ((n / kStages) - 1) & 1);
        if (tid == 0) {
          mbar_arrive_expect_tx(&s.full[slot], tx);
          const uint32_t dst = x.ring + slot * kStageBytes + kABytes;
          for (int bx = 0; bx * kBoxRows < tl.ntok; ++bx) tma_box(dst + bx * kBoxBytes, map, c * kChunk, tl.tok0 + bx * kBoxRows, &s.full[slot]);
        }
        uint8_t* line = x.smem + slot * kStageBytes + tid * 128;
#pragma unroll
        for (int ii = 0; ii < 2; ++ii) {
          const int group = 2 * hh + ii;
          const uint32_t scale = (sc >> (8 * group)) & 0xffu;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t lo[4], hi[4];  // units 4 ii + 2 h and + 1: word t from part t
#pragma unroll
            for (int t = 0; t < 4; ++t) {
              const uint32_t word = group == 0 ? q[t].x : group == 1 ? q[t].y : group == 2 ? q[t].z : q[t].w;
              uint32_t o[2];
              dequant_half<kWide>(word, scale, h, o);
              lo[t] = o[0], hi[t] = o[1];
            }
            const int unit = 4 * ii + 2 * h, g = tid & 7;
            *reinterpret_cast<uint4*>(line + ((unit ^ g) << 4)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            *reinterpret_cast<uint4*>(line + (((unit + 1) ^ g) << 4)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
          }
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, visible to wgmma (async proxy)
        mbar_arrive(&s.full[slot]);
      }
    }
    seq += chunks;
    wseq += chunks128;
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
    prefill_producer(const __grid_constant__ CUtensorMap map, const __grid_constant__ WeightMaps wm, Mxfp4Decode a, const int32_t* __restrict__ offsets, int experts,
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
    for (int i = 0; i < kWStages; ++i) {
      mbar_init(&sync.wfull[i], 1);  // warp 0 lane 0's expected bytes
      mbar_init(&sync.wempty[i], kProducers);
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
  const Ctx x{offsets, tile_start, experts, tile_start[experts], &sync, smem_u32(smem), smem, smem + kStages * kStageBytes,
              smem_u32(smem) + kStages * kStageBytes};
  if (threadIdx.x < kProducers) produce<kGated, kWide>(a, &map, wm, x, queue);
  else consume<kGated>(a, act_out, out, fn, x);
}

template <bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* xs,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  // The bulk copies of the packed weights need 16-byte aligned sources.
  const auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) != 0; };
  if (misaligned(a.packed) || misaligned(a.scales) || misaligned(b.packed) || misaligned(b.scales))
    return invalid_argument("moe_expert_mlp_prefill (wgmma producer): weights not 16-byte aligned");
  WeightMaps wm;
  {
    const Mxfp4Decode& m1 = kGated ? b : a;
    const uint64_t rtiles = static_cast<uint64_t>(experts * a.rows / 8), chunks128 = static_cast<uint64_t>(a.cols / 128);
    const uint64_t pext[2] = {chunks128 * 128, rtiles}, sext[2] = {chunks128 * 8, rtiles};
    const uint32_t pbox[2] = {128, 8}, sbox[2] = {8, 8};
    PDS_RETURN_IF_ERROR(encode_u32_tensor_map_2d(&wm.packed_a, a.packed, pext, chunks128 * 512, pbox, "moe prefill producer weights"));
    PDS_RETURN_IF_ERROR(encode_u32_tensor_map_2d(&wm.scales_a, a.scales, sext, chunks128 * 32, sbox, "moe prefill producer scales"));
    PDS_RETURN_IF_ERROR(encode_u32_tensor_map_2d(&wm.packed_m1, m1.packed, pext, chunks128 * 512, pbox, "moe prefill producer weights"));
    PDS_RETURN_IF_ERROR(encode_u32_tensor_map_2d(&wm.scales_m1, m1.scales, sext, chunks128 * 32, sbox, "moe prefill producer scales"));
  }
  CUtensorMap map;
  const uint64_t extent[2] = {static_cast<uint64_t>(a.cols), static_cast<uint64_t>(capacity)};
  const uint64_t stride[1] = {static_cast<uint64_t>(a.cols * 2)};
  const uint32_t box[2] = {64, static_cast<uint32_t>(kBoxRows)};
  PDS_RETURN_IF_ERROR(encode_bf16_tensor_map(&map, xs, 2, extent, stride, box, "moe prefill producer"));
  auto kernel = prefill_producer<kGated, kWide>;
  const int64_t per_tile = kGated ? kOutGated : kOutDown;
  const int64_t max_tiles = max_output_tiles(capacity, kTokTile, experts, a.rows, per_tile);
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, kSmem, max_tiles, kThreads));
  kernel<<<grid, kThreads, kSmem, stream>>>(map, wm, a, offsets, static_cast<int>(experts), act, out, fn, queue);
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
