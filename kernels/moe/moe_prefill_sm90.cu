// moe_expert_mlp_prefill (contract and design: moe_prefill.h): grouped MXFP4 GEMM over the
// local experts, mma.sync m16n8k16 bf16 with fp32 accumulators, weights-as-A (kMmaSync); the
// wgmma kernels live in moe_prefill_wgmma_sm90.cu.
#include <cuda_bf16.h>

#include "moe/moe_prefill.h"
#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_internal.h"
#include "moe/moe_prefill_schedule.h"

namespace pdserve::cuda {

namespace {

using namespace moe_prefill_detail;

constexpr int kThreads = 256;  // 8 warps
constexpr int kTokTile = 64;   // tokens of one expert per CTA tile (8 MMA column blocks)
constexpr int kChunk = 128;    // inputs per pipeline stage (one decode-layout tile column)
constexpr int kTilesPerStage = 64;  // 8-row weight tiles per stage: 32 gate + 32 up, or 64 down
constexpr int kStages = 4;
constexpr int kWBytes = kTilesPerStage * 512;
constexpr int kSBytes = kTilesPerStage * 32;
constexpr int kXRowBytes = kChunk * 2;
constexpr int kXBytes = kTokTile * kXRowBytes;
constexpr int kStageBytes = kWBytes + kSBytes + kXBytes;
constexpr size_t kSmem = size_t(kStages) * kStageBytes;
// The gate/up epilogue stages a tile's fp32 gate and up sums in the (drained) ring, token
// rows of kActStride floats: 260 = 8 mod 32 banks, so the 32 lanes' stores (rows 2t + k,
// columns g + ..) hit 32 different banks.
constexpr int kActStride = 260;
static_assert(size_t(2) * kTokTile * kActStride * 4 <= kSmem, "the staged gate/up tile must fit in the ring");

// Stage tile j (0..63) -> this projection's 8-row tile index within the output tile, and
// which matrix (gated: j < 32 gate, else up).
template <bool kGated>
__device__ __forceinline__ int warp_tile(int warp, int j) {  // j = 0..7: the warp's tiles, A operand j / 2
  if constexpr (kGated) return j < 4 ? 4 * warp + j : 32 + 4 * warp + (j - 4);
  return 8 * warp + j;
}

// mma.m16n8k16 without `volatile`, so ptxas may interleave the independent MMAs with the
// loads and the dequantisation.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One CTA tile: the cp.async ring over the input chunks, the MMAs, the epilogue. kNV: token
// column blocks computed (>= the real ones, rounded up to even), so the MMA loops have no
// branches and ptxas can schedule them freely.
template <bool kGated, bool kWide, int kNV>
__device__ __forceinline__ void run_tile(const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* __restrict__ x,
                                         uint16_t* __restrict__ act_out, float* __restrict__ out, const MoeAct& fn, uint8_t* smem,
                                         const Tile& tl) {
  constexpr int kOutPerTile = kGated ? 256 : 512;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(a.rows), cols = static_cast<int>(a.cols), chunks = cols / kChunk, rtiles = rows / 8;
  const int rt0 = tl.ot * (kOutPerTile / 8);
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // Copy assignments, fixed per thread: weight tile j = warp + 8k (k = 0..7; gated: k < 4 gate
  // tile warp + 8k, else up tile warp + 8(k - 4)), piece = lane; scales: thread < 128 takes
  // tile thread / 2, half thread % 2; token row r = tid / 16 + 16k, piece tid % 16. Bases and
  // strides are computed once, so few registers hold addresses.
  const int64_t tile_stride = int64_t(8) * chunks * 512;  // 8 row tiles further
  const int row_tile0 = rt0 + warp;
  const uint8_t* wa = a.packed + ((int64_t(tl.e) * rtiles + row_tile0) * chunks) * 512 + lane * 16;
  const uint8_t* wb = b.packed + ((int64_t(tl.e) * rtiles + row_tile0) * chunks) * 512 + lane * 16;
  const int sj = threadIdx.x >> 1, s_rt = rt0 + (kGated ? (sj & 31) : sj);
  const uint8_t* sp = ((kGated && sj >= 32) ? b.scales : a.scales) + ((int64_t(tl.e) * rtiles + s_rt) * chunks) * 32 + (threadIdx.x & 1) * 16;
  const bool s_ok = threadIdx.x < kTilesPerStage * 2 && s_rt < rtiles;
  const int xr0 = threadIdx.x >> 4, xpiece = threadIdx.x & 15;
  const uint16_t* xp = x + int64_t(tl.tok0) * cols + xpiece * 8;

  auto load = [&](int chunk, int stage) {
    const uint32_t sw = smem_base + stage * kStageBytes, ss = sw + kWBytes, sx = ss + kSBytes;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int rt = row_tile0 + 8 * (kGated ? (k & 3) : k);
      if (rt < rtiles) {
        const uint8_t* base = (kGated && k >= 4) ? wb : wa;
        cp_async16(sw + (warp + 8 * k) * 512 + lane * 16, base + (kGated ? (k & 3) : k) * tile_stride + chunk * 512, 16);
      }
    }
    if (s_ok) cp_async16(ss + threadIdx.x * 16, sp + chunk * 32, 16);
    // Token rows, 16-byte pieces XOR-swizzled by row parity: the MMA loads of rows g and
    // g + 1 (one quarter-warp) land in different bank halves. Rows past the expert: zeros.
#pragma unroll
    for (int k = 0; k < (kNV * 8 * 16 + kThreads - 1) / kThreads; ++k) {
      const int r = xr0 + 16 * k;
      const bool ok = r < tl.ntok;
      cp_async16(sx + r * kXRowBytes + ((xpiece ^ ((r & 1) << 2)) * 16), xp + (ok ? int64_t(r) * cols : 0) + chunk * kChunk, ok ? 16u : 0u);
    }
  };

  // Every projection's rows are a multiple of 128 (moe_prefill_fits), so a warp's 32 or 64
  // output rows are all real or all past the end.
  const bool live = (kGated ? tl.ot * 256 + 32 * warp : tl.ot * 512 + 64 * warp) < rows;
  float acc[4][kNV][4];
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int n = 0; n < kNV; ++n)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[p][n][v] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    cp_async_commit();
  }
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (c + kStages - 1 < chunks) load(c + kStages - 1, (c + kStages - 1) % kStages);
    cp_async_commit();
    if (!live) continue;
    const uint8_t* sw = smem + (c % kStages) * kStageBytes;
    const uint8_t* ss = sw + kWBytes;
    const uint8_t* sx = ss + kSBytes;
    uint4 q[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = *reinterpret_cast<const uint4*>(sw + warp_tile<kGated>(warp, j) * 512 + lane * 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // 32-input group i: two k-steps
      // Lane (g, t)'s 8 inputs of token row 8n + g; k-step h uses its half h (8 bytes).
      const uint8_t* xg = sx + g * kXRowBytes + (((4 * i + t) ^ ((g & 1) << 2)) * 16);
      uint32_t sc[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) sc[j] = ss[warp_tile<kGated>(warp, j) * 32 + g * 4 + i];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // k-step h of the group: every accumulator once, no back-to-back dependence
        uint32_t af[4][4];
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          uint32_t lo[2], hi[2];
          dequant_half<kWide>(word_of(q[2 * p], i), sc[2 * p], h, lo);
          dequant_half<kWide>(word_of(q[2 * p + 1], i), sc[2 * p + 1], h, hi);
          af[p][0] = lo[0], af[p][1] = hi[0], af[p][2] = lo[1], af[p][3] = hi[1];
        }
#pragma unroll
        for (int n = 0; n < kNV; ++n) {
          const uint2 v = *reinterpret_cast<const uint2*>(xg + 8 * n * kXRowBytes + 8 * h);
#pragma unroll
          for (int p = 0; p < 4; ++p) mma(acc[p][n], af[p], v.x, v.y);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: the next tile's first loads, or the gate/up staging

  if constexpr (kGated) {
    // Stage gate and up sums in shared memory, then one rolled loop applies the activation
    // and writes bf16 pairs, coalesced along the output row. Unrolled over the 128
    // accumulators, the activation's code was large enough to miss the instruction cache
    // every tile.
    float* sg = reinterpret_cast<float*>(smem);
    float* su = sg + kTokTile * kActStride;
    if (live) {
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int n = 0; n < kNV; ++n)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const int idx = (8 * n + 2 * t + (v & 1)) * kActStride + 32 * warp + 16 * p + g + 8 * (v >> 1);
            sg[idx] = acc[p][n][v];
            su[idx] = acc[p + 2][n][v];
          }
    }
    __syncthreads();
    const int width = min(kOutPerTile, rows - tl.ot * kOutPerTile);  // a multiple of 128
    uint16_t* dst = act_out + int64_t(tl.tok0) * rows + tl.ot * kOutPerTile;
#pragma unroll 1
    for (int i = threadIdx.x; i < tl.ntok * (kOutPerTile / 2); i += kThreads) {
      const int tok = i / (kOutPerTile / 2), f = 2 * (i % (kOutPerTile / 2));
      if (f >= width) continue;
      const float2 gv = *reinterpret_cast<const float2*>(sg + tok * kActStride + f);
      const float2 uv = *reinterpret_cast<const float2*>(su + tok * kActStride + f);
      *reinterpret_cast<__nv_bfloat162*>(dst + int64_t(tok) * rows + f) = __floats2bfloat162_rn(act_fast(fn, gv.x, uv.x), act_fast(fn, gv.y, uv.y));
    }
    __syncthreads();  // the staging area is the next tile's ring
  } else {
    if (!live) return;
    // acc[p][n]: (weight row g, tokens 2t, 2t+1), (row g + 8, the same tokens) of A operand p.
#pragma unroll
    for (int p = 0; p < 4; ++p) {
#pragma unroll
      for (int n = 0; n < kNV; ++n) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const int tok = 8 * n + 2 * t + k;
            if (tok >= tl.ntok) continue;
            const int f = tl.ot * 512 + 64 * warp + 16 * p + g + 8 * h;
            out[(tl.tok0 + int64_t(tok)) * rows + f] = acc[p][n][2 * h + k];
          }
        }
      }
    }
  }
}

// One persistent CTA: builds the tile list from `offsets`, then strides over it. A tile is
// (expert e, output tile ot, token tile mt); see moe_prefill.h.
template <bool kGated, bool kWide, bool kQueue>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_gemm(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts, const uint16_t* __restrict__ x,
                 uint16_t* __restrict__ act_out, float* __restrict__ out, MoeAct fn, TileQueue* queue_ptr) {  // queue_ptr: null unless kQueue
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int tile_start[kMaxExperts + 1];
  __shared__ int next_tile[2];  // kQueue: thread 0 fetches tile it + 1 while tile it runs
  constexpr int kOutPerTile = kGated ? 256 : 512;
  const int out_tiles = (static_cast<int>(a.rows) + kOutPerTile - 1) / kOutPerTile;

  scan_tile_starts(offsets, experts, kTokTile, out_tiles, tile_start);
  __syncthreads();
  const int total = tile_start[experts];

  int tile = blockIdx.x;
  for (int it = 0; tile < total; ++it) {
    // Read after run_tile's barriers; rewritten two tiles later, after the next tile's
    // barriers, so no thread still reads the old value.
    if (kQueue && threadIdx.x == 0) next_tile[it & 1] = int(gridDim.x + atomicAdd(&queue_ptr->next, 1u));
    const int e = expert_of_tile(tile_start, experts, tile), local = tile - tile_start[e];
    const int row_begin = offsets[e], nrows = offsets[e + 1] - row_begin;
    const int mtiles = (nrows + kTokTile - 1) / kTokTile;
    int ot, mt;
    moe_prefill_detail::prefill_tile_coords(local, mtiles, &ot, &mt);
    const Tile tl{e, ot, row_begin + mt * kTokTile, min(kTokTile, nrows - mt * kTokTile)};
    switch ((tl.ntok + 15) >> 4) {  // column-block pairs
      case 1: run_tile<kGated, kWide, 2>(a, b, x, act_out, out, fn, smem, tl); break;
      case 2: run_tile<kGated, kWide, 4>(a, b, x, act_out, out, fn, smem, tl); break;
      case 3: run_tile<kGated, kWide, 6>(a, b, x, act_out, out, fn, smem, tl); break;
      default: run_tile<kGated, kWide, 8>(a, b, x, act_out, out, fn, smem, tl); break;
    }
    tile = kQueue ? next_tile[it & 1] : tile + int(gridDim.x);
  }
  if (kQueue && threadIdx.x == 0) finish_tile_queue(queue_ptr);
}

template <bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  auto kernel = queue ? prefill_gemm<kGated, kWide, true> : prefill_gemm<kGated, kWide, false>;
  const int64_t per_tile = kGated ? 256 : 512;
  const int64_t max_tiles = max_output_tiles(capacity, kTokTile, experts, a.rows, per_tile);
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, kSmem, max_tiles, kThreads));
  kernel<<<grid, kThreads, kSmem, stream>>>(a, b, offsets, static_cast<int>(experts), x, act, out, fn, queue);
  return last_launch_status(kGated ? "moe_expert_mlp_prefill gate/up" : "moe_expert_mlp_prefill down");
}

}  // namespace

// kWgmma: correct in two H200 runs and 1.37-1.53x kMmaSync on uniform, Zipf and one-hot
// routing; kWgmmaWideN beat it only on uniform rows (1.06x) and lost 1.19-1.25x on the skewed
// ones (docs/perf.md, "wgmma main loop"); kWgmmaSmemW(Deep) were not faster in one H200 run
// (docs/perf.md, "Weights through the shared-memory ring"); nor were kWgmmaTma (0.92-1.00x)
// and kWgmmaTma4 (0.84-0.98x) in two (docs/perf.md, "Bulk tensor copies and four warpgroups").
// kWgmmaProducer (weights dequantised once into shared memory by a producer warpgroup) ran
// 0.64-0.71x kWgmma in one (docs/perf.md, "Producer warpgroup"); kWgmma160 (token tiles of up
// to 160) 0.84-0.97x in one (docs/perf.md, "Token tiles of 160"); kWgmmaG2 (0.70-0.76x, it
// spills) and kWgmmaSmemWG2 (0.95-1.03x) in one (docs/perf.md, "Bare wgmma loop");
// kWgmmaCarry(6) (the ring carried across tiles) 1.01-1.09x on one hot expert but 0.90-0.98x
// with the queue on uniform and Zipf rows in one (docs/perf.md, "Ring carried across tiles");
// kWgmmaTmaMc (token chunks multicast across a 2-CTA cluster) 0.82-0.90x with the queue in two
// (docs/perf.md, "Token multicast across a 2-CTA cluster"); kWgmmaPingpong (a whole tile a
// warpgroup, k-loops in turns) 0.78-0.90x in two (docs/perf.md, "Pingpong consumer warpgroups").
// Since the twenty-third session kAuto takes kWgmmaTma160 (an expert's last token tile absorbs a
// tail of up to 32 rows, on the bulk-copy ring): 1.17-1.22x kWgmma on uniform rows (EP4's ~146 a
// expert: one tile instead of 128 + a dequantisation-bound 18-row tail), 0.95-0.97x on Zipf and
// 0.95-0.98x on one hot expert, whose tiles are full 128s either way and where the bulk-copy
// ring's N = 128 loop runs a few percent behind kWgmma's (docs/perf.md, "Tails absorbed into
// the last token tile").
// Since the twenty-sixth session kAuto takes kWgmmaTma160W (the packed words in the token ring,
// token tiles of 160): 1.02-1.06x kWgmmaTma160 on uniform rows (551-615 TFLOP/s), 1.08-1.12x Zipf,
// 1.04-1.06x one hot expert (both before the tiles of 160, which add 1.03-1.05x / 1.01-1.03x); random rows 0.99-1.06x run alone, 0.89-1.06x after the other three
// routings in one process (power-limited clocks there) (docs/perf.md, "The packed words through the token ring").
// Its narrow tiles' MMAs as one group a chunk (twenty-seventh session): Zipf 1.03-1.05x, one hot
// expert 1.03-1.04x; 623-626 TFLOP/s on uniform rows in that call ("Narrow tiles: a chunk's MMAs as one group").
// Since the twenty-ninth session a chunk of few rows an expert (at most kMoePrefillNarrowMaxRowsPerExpert on
// average) takes kWgmmaTmaNarrow: tiles of up to 64 tokens on two CTAs an SM, 1.05-1.18x kWgmmaTma160W
// from 2 to 32 rows an expert (docs/perf.md, "Two CTAs an SM on narrow tiles").
MoePrefillKernel moe_prefill_choice(MoePrefillKernel kernel, int64_t rows_per_expert) {
  if (kernel != MoePrefillKernel::kAuto) return kernel;
  const bool narrow = rows_per_expert >= 0 && rows_per_expert <= kMoePrefillNarrowMaxRowsPerExpert;
  return narrow ? MoePrefillKernel::kWgmmaTmaNarrow : MoePrefillKernel::kWgmmaTma160W;
}

bool moe_prefill_fits(const MoeDecodeWeights& w) {
  auto ok = [](const Mxfp4Decode& m) {
    return m.packed && m.scales && m.rows > 0 && m.cols > 0 && m.cols % 128 == 0 && m.bits == Mxfp4DecodeBits::kBf16;
  };
  return ok(w.w1) && ok(w.w3) && ok(w.w2) && w.w3.rows == w.w1.rows && w.w3.cols == w.w1.cols && w.w2.rows == w.w1.cols &&
         w.w2.cols == w.w1.rows && w.w1.rows < (1 << 24) && w.w1.cols < (1 << 24);
}

Status moe_expert_mlp_prefill(const MoeDecodeWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                              const uint16_t* x_sorted, uint16_t* act, float* out_sorted, cudaStream_t stream, MoeDecodeWorkspace workspace,
                              MoePrefillKernel kernel) {
  if (!moe_prefill_fits(w))
    return invalid_argument("moe_expert_mlp_prefill: weight widths must be multiples of 128 and the bits Mxfp4DecodeBits::kBf16 (moe_prefill_fits)");
  if (local_experts <= 0 || local_experts > kMaxExperts) return invalid_argument("moe_expert_mlp_prefill: local_experts must be 1..1024");
  if (capacity <= 0) return Status::ok();
  if (capacity > INT32_MAX / 2) return invalid_argument("moe_expert_mlp_prefill: capacity too large");
  TileQueue* queue = workspace.data && workspace.bytes >= sizeof(TileQueue) ? static_cast<TileQueue*>(workspace.data) : nullptr;
  const MoePrefillKernel chosen = moe_prefill_choice(kernel);
  if (chosen != MoePrefillKernel::kMmaSync)
    return expert_mlp_prefill_wgmma(w, offsets, local_experts, capacity, x_sorted, act, out_sorted, queue, chosen, stream);
  return moe_prefill_detail::run_gate_up_then_down(
      w, x_sorted, act, out_sorted,
      [&](auto gated, auto wide, const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* x, uint16_t* act_out, float* out,
          const MoeAct& fn) {
        return launch<decltype(gated)::value, decltype(wide)::value>(a, b, offsets, local_experts, capacity, x, act_out, out, fn, queue, stream);
      });
}

}  // namespace pdserve::cuda
