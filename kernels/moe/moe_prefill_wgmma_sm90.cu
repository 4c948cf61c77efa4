// moe_expert_mlp_prefill's warpgroup-MMA variants (MoePrefillKernel::kWgmma, kWgmmaWideN, kWgmma160, kWgmmaG2, ...;
// contract and design: moe_prefill.h, docs/design.md). Two consumer warpgroups a CTA, each
// running wgmma.m64nNk16 with A = 64 weight rows dequantised in registers (the same fragment
// as mma.m16n8k16's A, per warp 16 rows = two decode-layout tiles) and B = N tokens from a
// cp.async ring in shared memory in the 128-byte swizzle, fp32 accumulators in registers.
// kWgmma: two m64 blocks a warpgroup (gate and up rows), token tiles of 128 cut in order
// (N 32..128). kWgmmaWideN: one m64 block a warpgroup (gate on the first, up on the second),
// an expert's rows cut into equal token tiles of at most 192 (N 32..192): half the
// accumulators a token, so an expert of ~146 rows is one tile and no short tail tile
// repeats the dequantisation for a few tokens. kWgmma160: kWgmma's blocks with token tiles of
// up to 160 in order (N 32..160), the next chunk's packed words refilled in halves.
// The tokens must be in wgmma_k_position order (moe_prefill_schedule.h), which
// moe_permute_bf16 and this gate/up epilogue write.
#include <cuda_bf16.h>

#include <cstdlib>

#include "mla/wgmma_bf16.cuh"
#include "moe/moe_prefill.h"
#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_internal.h"
#include "moe/moe_prefill_schedule.h"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_prefill_detail {

namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kChunk = 128;    // inputs per ring stage: one decode-layout tile column

// The main-loop variants of this file (moe_prefill.h): kRegW = kWgmma, kWide = kWgmmaWideN,
// kSmemW = kWgmmaSmemW (the packed weights and scales travel through the cp.async ring with
// the tokens, kAhead chunks ahead, instead of global -> registers one chunk ahead; frees the
// 20 prefetch registers), kSmemWDeep = kWgmmaSmemWDeep (kSmemW with two wgmma groups left
// running while the next k-step dequantises: wait_group 2), kRegW160 = kWgmma160 (kWgmma with
// token tiles of up to 160: an expert of 129..160 rows is one N = 160 tile, dequantised once,
// instead of an N = 128 tile and an N = 32 tail that repeats the whole dequantisation).
// kRegWG2 / kSmemWG2 = kWgmmaG2 / kWgmmaSmemWG2: kRegW / kSmemW dequantising two k-steps into
// two A fragments per block before one fence + commit, so each wait_group 1 leaves up to two
// k-steps (four wgmmas) queued instead of one (docs/perf.md, "Bare wgmma loop").
enum Variant : int { kRegW = 0, kWideN = 1, kSmemW = 2, kSmemWDeep = 3, kRegW160 = 4, kRegWG2 = 5, kSmemWG2 = 6 };
// Timing experiments only, compiled with -DPDS_PREFILL_ABLATE (the moe_prefill_bench_ablate
// binary; docs/perf.md "Bare wgmma loop"): kRegW + 16 + mask is kRegW with parts of its main
// loop removed, mask bits 1: no weight loads (constant words), 2: no token copies, 4: no proxy
// fence, 8: no CTA barrier a chunk. Its outputs are wrong; never reached without the macro.
constexpr int kAblate = 16;
template <int kVar>
__host__ __device__ constexpr int ablate_mask() { return kVar >= kAblate ? kVar - kAblate : 0; }

template <int kVar>
struct Cfg {
  static constexpr bool kSplit = kVar == kWideN;         // one m64 block a warpgroup, balanced token tiles
  static constexpr bool kBig = kVar == kRegW160;         // two m64 blocks, token tiles of 160 in order
  static constexpr bool kWeightsInSmem = kVar == kSmemW || kVar == kSmemWDeep || kVar == kSmemWG2;
  static constexpr int kGroup = kVar == kRegWG2 || kVar == kSmemWG2 ? 2 : 1;  // k-steps a commit group
  static constexpr int kPending = kVar == kSmemWDeep ? 2 : 1;  // wgmma groups left running after each k-step
  // kSmemWDeep reads each k-step's packed words from shared memory as it dequantises (the
  // third A buffer would not fit beside a chunk's 16 packed registers: 255 + spills).
  static constexpr bool kWordsPerStep = kVar == kSmemWDeep;
  static constexpr int kBlocks = kSplit ? 1 : 2;         // m64 blocks a warpgroup
  static constexpr int kTokTile = kSplit ? 192 : kBig ? 160 : 128;  // most tokens a tile: the largest wgmma N used
  static constexpr bool kBalanced = kSplit;              // equal token tiles per expert, else 128 in order
  static constexpr int kOutGated = kSplit ? 64 : 128;    // gate (and as many up) outputs a tile
  static constexpr int kOutDown = kSplit ? 128 : 256;    // down outputs a tile
  static constexpr int kStages = (kSplit || kWeightsInSmem) ? 4 : 5;  // ring slots
  static constexpr int kAhead = kStages - 2;             // chunks in flight ahead of the MMAs; slot c - 2 is free (main loop)
  static constexpr int kHalfBytes = kTokTile * 128;      // 64 inputs x the tokens: one column of swizzle atoms
  static constexpr int kQ = 2 * kBlocks;                 // decode-layout tiles a warp reads a chunk (two a block)
  // kWeightsInSmem: after the tokens, each warp's kQ 512-byte weight tiles, then its kQ
  // 32-byte scale rows (8 warps); the stage stays a multiple of 1024 bytes.
  static constexpr int kWeightOff = 2 * kHalfBytes;
  static constexpr int kScaleOff = kWeightOff + 8 * kQ * 512;
  static constexpr int kStageBytes = kWeightsInSmem ? kScaleOff + 1024 : 2 * kHalfBytes;
  static constexpr int kActStride = kOutGated + 4;       // gate/up staging row (floats): 4 mod 32 banks, conflict-free stores
  static constexpr size_t kRingBytes = size_t(kStages) * kStageBytes;
  static constexpr size_t kSmem = kRingBytes + 1024;     // + the 1024-byte alignment the swizzle atoms need
  static_assert(size_t(2) * kTokTile * kActStride * 4 <= kRingBytes, "the staged gate/up tile must fit in the ring");
  static_assert(kHalfBytes % 1024 == 0 && kStageBytes % 1024 == 0, "swizzle atoms start 1024-byte aligned");
  static_assert(8 * kQ * 32 <= 1024, "the scale rows fit their 1 KB");
  static_assert(kSmem <= 227 * 1024, "shared memory a CTA");
};


// One tile. kWgmma: gated 128 gate + 128 up outputs (warpgroup wg: rows 64 wg .. + 63 of
// each), down 256 outputs (warpgroup wg: rows 128 wg .. + 127 as two m64 blocks).
// kWgmmaWideN: gated 64 gate (warpgroup 0) + the same 64 up rows (warpgroup 1), down 128
// outputs (warpgroup wg: rows 64 wg .. + 63). kN: the wgmma N, the tile's tokens rounded up
// (rows past the tile are zeros in shared memory).
template <int kVar, bool kGated, bool kWide, int kN>
__device__ __forceinline__ void run_tile(const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* __restrict__ x,
                                         uint16_t* __restrict__ act_out, float* __restrict__ out, const MoeAct& fn, uint8_t* smem,
                                         const Tile& tl) {
  using C = Cfg<kVar>;
  constexpr bool kSplit = C::kSplit;
  constexpr int kOut = kGated ? C::kOutGated : C::kOutDown, kHalfBytes = C::kHalfBytes, kStageBytes = C::kStageBytes;
  constexpr int kStages = C::kStages, kAhead = C::kAhead, kActStride = C::kActStride;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rows = static_cast<int>(a.rows), cols = static_cast<int>(a.cols), chunks = cols / kChunk, rtiles = rows / 8;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // First row of this warpgroup's m64 blocks (kWgmma: block 1 in b when gated).
  const int r0 = kSplit ? (kGated ? tl.ot * kOut : tl.ot * kOut + 64 * wg) : (kGated ? tl.ot * kOut + 64 * wg : tl.ot * kOut + 128 * wg);
  const int r1 = kSplit ? r0 : kGated ? r0 : r0 + 64;
  const Mxfp4Decode& m0 = (kSplit && kGated && wg == 1) ? b : a;
  const Mxfp4Decode& m1 = kGated ? b : a;
  // Rows are a multiple of 128 (moe_prefill_fits): a warpgroup's rows are all real or none.
  const bool live = r1 + 64 <= rows;

  // This warp's two 8-row tiles (rows 16 warp .. + 15 of each block): lane's 16 bytes of the
  // low tile, the high tile chunks * 512 bytes further; the scale word (4 groups) of row g.
  const int64_t tile_bytes = int64_t(chunks) * 512;
  const int64_t t0 = int64_t(tl.e) * rtiles + r0 / 8 + 2 * warp, t1 = int64_t(tl.e) * rtiles + r1 / 8 + 2 * warp;
  const uint8_t* pa = m0.packed + t0 * tile_bytes + lane * 16;
  const uint8_t* pb = m1.packed + t1 * tile_bytes + lane * 16;
  const uint8_t* sa = m0.scales + t0 * chunks * 32 + g * 4;
  const uint8_t* sb = m1.scales + t1 * chunks * 32 + g * 4;
  constexpr int kQ = C::kQ;  // packed quads (and scale words) a chunk: two tiles a block
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
  // kWeightsInSmem: this warp's kQ tiles of chunk c into `slot`: lane's 16 bytes of each
  // (read back by the same lane), and the tiles' 32-byte scale rows by lanes 0 .. 2 kQ - 1
  // (read by the whole warp after the chunk's barrier).
  const int wslot = (tid >> 5) * kQ;  // this warp's first tile in the stage's weight area
  auto load_w_smem = [&](int c, int slot) {
    const uint32_t base = smem_base + slot * kStageBytes;
    const uint32_t wdst = base + C::kWeightOff + wslot * 512 + lane * 16;
    cp_async16(wdst, pa + c * 512, 16u);
    cp_async16(wdst + 512, pa + tile_bytes + c * 512, 16u);
    if constexpr (kQ == 4) {
      cp_async16(wdst + 1024, pb + c * 512, 16u);
      cp_async16(wdst + 1536, pb + tile_bytes + c * 512, 16u);
    }
    if (lane < 2 * kQ) {
      const int j = lane >> 1, part = lane & 1;
      const uint8_t* src = (j < 2 ? sa - g * 4 : sb - g * 4) + (j & 1) * chunks * 32 + c * 32 + part * 16;
      cp_async16(base + C::kScaleOff + wslot * 32 + lane * 16, src, 16u);
    }
  };
  auto read_w_smem = [&](int slot, uint4 (&q)[kQ], uint32_t (&s)[kQ]) {
    const uint8_t* base = smem + slot * kStageBytes;
    const uint8_t* wsrc = base + C::kWeightOff + wslot * 512 + lane * 16;
    const uint8_t* ssrc = base + C::kScaleOff + wslot * 32 + g * 4;
#pragma unroll
    for (int j = 0; j < kQ; ++j) {
      if constexpr (!C::kWordsPerStep) q[j] = *reinterpret_cast<const uint4*>(wsrc + j * 512);
      s[j] = *reinterpret_cast<const uint32_t*>(ssrc + j * 32);
    }
  };
  // kWordsPerStep: tile j's packed word of group i in `slot` (this lane's 16 bytes, word i).
  auto smem_word = [&](int slot, int j, int i) {
    return *reinterpret_cast<const uint32_t*>(smem + slot * kStageBytes + C::kWeightOff + wslot * 512 + lane * 16 + j * 512 + i * 4);
  };

  // Token rows of a chunk: 16-byte piece p (8 inputs) of row r goes to half p / 8, row r's
  // 128-byte line, slot (p % 8) ^ (r % 8): the 128-byte swizzle the descriptor names.
  const int piece = tid & 15, xr0 = tid >> 4;
  const uint16_t* xp = x + int64_t(tl.tok0) * cols + piece * 8;
  const uint32_t piece_off = (piece >> 3) * kHalfBytes;
  auto load_x = [&](int c, int slot) {
    const uint32_t base = smem_base + slot * kStageBytes + piece_off;
    if constexpr (C::kBig) {
      // Rolled: unrolled, ptxas keeps up to 10 rows' addresses live across the chunk loop,
      // which the 160 accumulators leave no registers for.
      const uint16_t* src = xp + int64_t(xr0) * cols + c * kChunk;
      const int64_t step = int64_t(16) * cols;
#pragma unroll 1
      for (int r = xr0; r < kN; r += 16, src += step) {
        const bool ok = r < tl.ntok;
        cp_async16(base + r * 128 + (((piece & 7) ^ (r & 7)) << 4), ok ? src : xp, ok ? 16u : 0u);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kN / 16; ++k) {
        const int r = xr0 + 16 * k;
        const bool ok = r < tl.ntok;
        cp_async16(base + r * 128 + (((piece & 7) ^ (r & 7)) << 4), xp + (ok ? int64_t(r) * cols : 0) + c * kChunk, ok ? 16u : 0u);
      }
    }
  };

  float acc0[kN / 2], acc1[C::kBlocks == 2 ? kN / 2 : 1];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc0[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < int(sizeof(acc1) / 4); ++i) acc1[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < chunks) {
      if constexpr (!(ablate_mask<kVar>() & 2)) load_x(s, s);
      if constexpr (C::kWeightsInSmem)
        if (live) load_w_smem(s, s);
    }
    cp_async_commit();
  }
  [[maybe_unused]] uint4 qn[C::kWeightsInSmem ? 1 : kQ];
  [[maybe_unused]] uint32_t sn[C::kWeightsInSmem ? 1 : kQ];
  if constexpr (!C::kWeightsInSmem && !(ablate_mask<kVar>() & 1))
    if (live) load_w(0, qn, sn);
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kAhead - 1>();
    if constexpr (!(ablate_mask<kVar>() & 4)) wgmma::fence_proxy_async();  // the cp.async writes (generic proxy) become visible to wgmma (async proxy)
    if constexpr (!(ablate_mask<kVar>() & 8)) __syncthreads();
    // Slot (c + kAhead) % kStages was last read by chunk c + kAhead - kStages <= c - 2,
    // whose wgmmas every warpgroup finished before this barrier (wait<kPending <= 2> leaves
    // only chunk c - 1's last groups running).
    if (c + kAhead < chunks) {
      if constexpr (!(ablate_mask<kVar>() & 2)) load_x(c + kAhead, (c + kAhead) % kStages);
      if constexpr (C::kWeightsInSmem)
        if (live) load_w_smem(c + kAhead, (c + kAhead) % kStages);
    }
    cp_async_commit();
    if (!live) continue;
    uint4 q[kQ];
    uint32_t sc[kQ];
    if constexpr (C::kWeightsInSmem) {
      read_w_smem(c % kStages, q, sc);
    } else if constexpr (C::kBig) {
      // 160 accumulators leave no room for a second chunk of packed words: qn is refilled in
      // halves inside the k-step loop (next_half, load_words_half), only the scale words a chunk ahead here.
#pragma unroll
      for (int j = 0; j < kQ; ++j) sc[j] = sn[j];
      if (c + 1 < chunks) load_scales(sa, sb, chunks, c + 1, sn);
    } else if constexpr (ablate_mask<kVar>() & 1) {
#pragma unroll
      for (int j = 0; j < kQ; ++j)
        q[j] = make_uint4(lane * 0x9E3779B9u ^ c, lane * 0x85EBCA6Bu ^ (c << 3), lane * 0xC2B2AE35u ^ (c << 6), lane * 0x27D4EB2Fu ^ (c << 9)),
        sc[j] = 0x7E7F7D80u + j;
    } else {
#pragma unroll
      for (int j = 0; j < kQ; ++j) q[j] = qn[j], sc[j] = sn[j];
      if (c + 1 < chunks) load_w(c + 1, qn, sn);  // a chunk ahead, in registers
    }
    // kBig: after k-step 3 (words 0-1 of every tile dequantised) and 7 (words 2-3), those
    // words of the next chunk go into the same registers. (ptxas keeps that placement in the
    // gate/up kernels but sinks the loads to the last k-step in the down ones, asm volatile
    // loads too; what it saves either way is the registers.)
    [[maybe_unused]] auto next_half = [&](auto part) { load_words_half(pa, pb, tile_bytes, c + 1, part, qn); };
    const uint32_t slot = smem_base + (c % kStages) * kStageBytes;
    const int wslot_c = c % kStages;
    auto word = [&](int j, int i) { return C::kWordsPerStep ? smem_word(wslot_c, j, i) : word_of(C::kBig ? qn[j] : q[j], i); };
    constexpr int kG = C::kGroup;
#pragma unroll
    for (int s0 = 0; s0 < 8; s0 += kG) {  // k-steps s0 .. s0 + kG - 1, one commit group
      uint32_t fa[kG][4], fb[kG][4];
#pragma unroll
      for (int u = 0; u < kG; ++u) {  // k-step s: group i = s / 2, half h = s % 2
        const int s = s0 + u, i = s >> 1, h = s & 1;
        uint32_t lo[2], hi[2];
        dequant_half<kWide>(word(0, i), (sc[0] >> (8 * i)) & 0xffu, h, lo);
        dequant_half<kWide>(word(1, i), (sc[1] >> (8 * i)) & 0xffu, h, hi);
        fa[u][0] = lo[0], fa[u][1] = hi[0], fa[u][2] = lo[1], fa[u][3] = hi[1];
        fb[u][0] = fb[u][1] = fb[u][2] = fb[u][3] = 0u;
        if constexpr (kQ == 4) {
          dequant_half<kWide>(word(2, i), (sc[2] >> (8 * i)) & 0xffu, h, lo);
          dequant_half<kWide>(word(3, i), (sc[3] >> (8 * i)) & 0xffu, h, hi);
          fb[u][0] = lo[0], fb[u][1] = hi[0], fb[u][2] = lo[1], fb[u][3] = hi[1];
        }
        if constexpr (C::kBig)
          if ((s & 3) == 3 && c + 1 < chunks) next_half(s >> 2);
      }
      wgmma_fence();
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        const int s = s0 + u;
        const uint64_t desc = sw128_desc(slot + (s >> 2) * kHalfBytes + (s & 3) * 32);
        wgmma_rs<kN>(acc0, fa[u], desc);
        if constexpr (kQ == 4) wgmma_rs<kN>(acc1, fb[u], desc);
      }
      wgmma_commit();
      wgmma_wait<C::kPending>();  // group s0 - kPending kG is done: its A registers are free
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: the gate/up staging, or the next tile's first copies

  // Accumulator element 4j + v: weight row 16 warp + g + 8 (v / 2) of the block, token 8j + 2t + v % 2.
  if constexpr (kGated) {
    float* sg = reinterpret_cast<float*>(smem);
    float* su = sg + C::kTokTile * kActStride;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1), f = 16 * warp + g + 8 * (v >> 1);
        if constexpr (kSplit) {
          (wg == 0 ? sg : su)[tok * kActStride + f] = acc0[4 * j + v];
        } else {
          sg[tok * kActStride + 64 * wg + f] = acc0[4 * j + v];
          su[tok * kActStride + 64 * wg + f] = acc1[4 * j + v];
        }
      }
    __syncthreads();
    // act in wgmma_k_position order (the down launch's B): pairs stay adjacent.
    uint16_t* dst = act_out + int64_t(tl.tok0) * rows + tl.ot * kOut;
#pragma unroll 1
    for (int i = tid; i < tl.ntok * (kOut / 2); i += kThreads) {
      const int tok = i / (kOut / 2), f = 2 * (i % (kOut / 2));
      const float2 gv = *reinterpret_cast<const float2*>(sg + tok * kActStride + f);
      const float2 uv = *reinterpret_cast<const float2*>(su + tok * kActStride + f);
      const int pos = (f & ~31) | wgmma_k_position(f & 31);
      *reinterpret_cast<__nv_bfloat162*>(dst + int64_t(tok) * rows + pos) = __floats2bfloat162_rn(act_fast(fn, gv.x, uv.x), act_fast(fn, gv.y, uv.y));
    }
    __syncthreads();  // the staging area is the next tile's ring
  } else {
    if (!live) return;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int tok = 8 * j + 2 * t + (v & 1);
        if (tok >= tl.ntok) continue;
        const int f = 16 * warp + g + 8 * (v >> 1);
        float* o = out + (tl.tok0 + int64_t(tok)) * rows;
        o[r0 + f] = acc0[4 * j + v];
        if constexpr (!kSplit) o[r1 + f] = acc1[4 * j + v];
      }
  }
}

template <int kVar, bool kGated, bool kWide, bool kQueue>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts, const uint16_t* __restrict__ x,
                  uint16_t* __restrict__ act_out, float* __restrict__ out, MoeAct fn, TileQueue* queue_ptr) {  // queue_ptr: null unless kQueue
  extern __shared__ uint8_t smem_raw[];
  __shared__ int tile_start[kMaxExperts + 1];
  __shared__ int next_tile[2];  // kQueue: thread 0 fetches tile it + 1 while tile it runs
  uint8_t* smem = smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  using C = Cfg<kVar>;
  constexpr bool kSplit = C::kSplit;
  constexpr int kOut = kGated ? C::kOutGated : C::kOutDown, kTokTile = C::kTokTile;
  const int out_tiles = (static_cast<int>(a.rows) + kOut - 1) / kOut;
  scan_tile_starts(offsets, experts, kTokTile, out_tiles, tile_start);
  __syncthreads();
  const int total = tile_start[experts];

  int tile = blockIdx.x;
  for (int it = 0; tile < total; ++it) {
    // Read after run_tile's barriers; rewritten two tiles later, after the next tile's barriers.
    if (kQueue && threadIdx.x == 0) next_tile[it & 1] = int(gridDim.x + atomicAdd(&queue_ptr->next, 1u));
    const int e = expert_of_tile(tile_start, experts, tile), local = tile - tile_start[e];
    const int row_begin = offsets[e], nrows = offsets[e + 1] - row_begin;
    const int mtiles = (nrows + kTokTile - 1) / kTokTile;
    int ot, mt;
    prefill_tile_coords(local, mtiles, &ot, &mt);
    // Token tiles: kTokTile in order, or (kBalanced) mtiles equal ones of per <= kTokTile.
    // Tiles cover [0, nrows) either way; a balanced split of a huge expert can leave the
    // last tile empty (never below ~18K rows), which is skipped, the CTA as a whole.
    const int per = C::kBalanced ? (nrows + mtiles - 1) / mtiles : kTokTile;
    const Tile tl{e, ot, row_begin + mt * per, min(per, nrows - mt * per)};
    const int nv = (tl.ntok + 31) >> 5;
    if (nv <= 1) {
      if (tl.ntok > 0) run_tile<kVar, kGated, kWide, 32>(a, b, x, act_out, out, fn, smem, tl);
    } else if (nv == 2) {
      run_tile<kVar, kGated, kWide, 64>(a, b, x, act_out, out, fn, smem, tl);
    } else if (nv == 3) {
      run_tile<kVar, kGated, kWide, 96>(a, b, x, act_out, out, fn, smem, tl);
    } else if (nv == 4 || (!kSplit && !C::kBig)) {
      run_tile<kVar, kGated, kWide, 128>(a, b, x, act_out, out, fn, smem, tl);
    } else if constexpr (C::kBig) {
      run_tile<kVar, kGated, kWide, 160>(a, b, x, act_out, out, fn, smem, tl);
    } else if constexpr (kSplit) {
      if (nv == 5) run_tile<kVar, kGated, kWide, 160>(a, b, x, act_out, out, fn, smem, tl);
      else run_tile<kVar, kGated, kWide, 192>(a, b, x, act_out, out, fn, smem, tl);
    }
    tile = kQueue ? next_tile[it & 1] : tile + int(gridDim.x);
  }
  if (kQueue && threadIdx.x == 0) finish_tile_queue(queue_ptr);
}

template <int kVar, bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x,
              uint16_t* act, float* out, const MoeAct& fn, TileQueue* queue, cudaStream_t stream) {
  using C = Cfg<kVar>;
  auto kernel = queue ? prefill_wgmma<kVar, kGated, kWide, true> : prefill_wgmma<kVar, kGated, kWide, false>;
  const int64_t per_tile = kGated ? C::kOutGated : C::kOutDown;
  const int64_t max_tiles = max_output_tiles(capacity, C::kTokTile, experts, a.rows, per_tile);
  PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, C::kSmem, max_tiles, kThreads));
  kernel<<<grid, kThreads, C::kSmem, stream>>>(a, b, offsets, static_cast<int>(experts), x, act, out, fn, queue);
  return last_launch_status(kGated ? "moe_expert_mlp_prefill (wgmma) gate/up" : "moe_expert_mlp_prefill (wgmma) down");
}

template <int kVar>
Status run_both(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity, const uint16_t* x_sorted,
                uint16_t* act, float* out_sorted, TileQueue* queue, cudaStream_t stream) {
  return run_gate_up_then_down(
      w, x_sorted, act, out_sorted,
      [&](auto gated, auto wide, const Mxfp4Decode& a, const Mxfp4Decode& b, const uint16_t* x, uint16_t* act_out, float* out,
          const MoeAct& fn) {
        return launch<kVar, decltype(gated)::value, decltype(wide)::value>(a, b, offsets, experts, capacity, x, act_out, out, fn, queue, stream);
      });
}

}  // namespace

Status expert_mlp_prefill_wgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity,
                                const uint16_t* x_sorted, uint16_t* act, float* out_sorted, void* queue_words, MoePrefillKernel kernel,
                                cudaStream_t stream) {
  TileQueue* queue = static_cast<TileQueue*>(queue_words);
#ifdef PDS_PREFILL_ABLATE
  if (const char* mask = std::getenv("PDS_PREFILL_ABLATE"); mask && kernel == MoePrefillKernel::kWgmma) {
    switch (std::atoi(mask)) {
      case 1: return run_both<kAblate + 1>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
      case 2: return run_both<kAblate + 2>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
      case 3: return run_both<kAblate + 3>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
      case 4: return run_both<kAblate + 4>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
      case 7: return run_both<kAblate + 7>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
      case 15: return run_both<kAblate + 15>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
      default: break;
    }
  }
  // The ablation build instantiates kRegW's forms only (compile time).
  if (kernel != MoePrefillKernel::kWgmma) return invalid_argument("moe_expert_mlp_prefill: the PDS_PREFILL_ABLATE build runs kWgmma only");
  return run_both<kRegW>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
#else
  switch (kernel) {
    case MoePrefillKernel::kWgmmaWideN: return run_both<kWideN>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaSmemW: return run_both<kSmemW>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaSmemWDeep:
      return run_both<kSmemWDeep>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmma: return run_both<kRegW>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmma160: return run_both<kRegW160>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaG2: return run_both<kRegWG2>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaSmemWG2: return run_both<kSmemWG2>(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue, stream);
    case MoePrefillKernel::kWgmmaTma:
    case MoePrefillKernel::kWgmmaTma4:
    case MoePrefillKernel::kWgmmaTmaMc:
    case MoePrefillKernel::kWgmmaTma160:
    case MoePrefillKernel::kWgmmaTma160W:
    case MoePrefillKernel::kWgmmaTmaNarrow:
      return expert_mlp_prefill_wgmma_tma(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, kernel, stream);
    case MoePrefillKernel::kWgmmaCarry:
    case MoePrefillKernel::kWgmmaCarry6:
      return expert_mlp_prefill_wgmma_carry(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, kernel, stream);
    case MoePrefillKernel::kWgmmaPingpong:
      return expert_mlp_prefill_wgmma_pingpong(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
    case MoePrefillKernel::kWgmmaProducer:
      return expert_mlp_prefill_wgmma_producer(w, offsets, experts, capacity, x_sorted, act, out_sorted, queue_words, stream);
    default: return invalid_argument("moe_expert_mlp_prefill: not a wgmma main loop");
  }
#endif
}

}  // namespace pdserve::cuda::moe_prefill_detail
