// moe_expert_mlp_decode (contract and weight layout: moe_decode.h). Per launch, CTAs
// stride over the units (touched expert, 8-row tile); the touched experts are listed from
// `offsets` by each CTA, so untouched experts cost nothing and nothing waits on the host.
// In a unit, the 8 warps split the 128-input chunks (warp w takes w, w+8, ...), issue all
// their weight loads at once (up to kBatch 16-byte loads per lane and matrix), then per
// word: dequantise in registers (a few bit ops and one bf16x2 multiply per two weights)
// and run two mma.m16n8k16 (tokens x 16 inputs x 8 rows, fp32 accumulators). The warps'
// partial sums meet in shared memory; the gated launch applies the activation there.
#include <algorithm>
#include <string>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_wa.cuh"

namespace pdserve::cuda {

namespace {

using namespace moe_decode_detail;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTokens = 16;  // rows per pass: the MMA's M
constexpr int kBatch = 4;    // chunks per warp in flight: 8 warps x 4 x 128 = 4096 inputs

// y[row, r] = act(x[row] . A[e, r], x[row] . B[e, r]) (gated) or x[row] . A[e, r], for
// every row of every touched expert. x: [*, cols] fp32; y: [*, a.rows] fp32.
template <bool kGated, bool kWide>
__global__ void __launch_bounds__(kThreads) decode_gemm(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                                                        const float* __restrict__ x, float* __restrict__ y, MoeAct act) {
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_red[kWarps][kGated ? 2 : 1][kTokens][8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  list_touched_experts(offsets, experts, s_list, &s_count);
  __syncthreads();
  const int tiles = static_cast<int>(a.rows / 8), chunks = static_cast<int>(a.cols / 128);
  const int64_t units = int64_t(s_count) * tiles, cols = a.cols;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int e = s_list[u / tiles], n = static_cast<int>(u % tiles);
    const int begin = offsets[e], end = offsets[e + 1];
    const int64_t tile0 = (int64_t(e) * tiles + n) * chunks;
    const uint4* pa = reinterpret_cast<const uint4*>(a.packed) + tile0 * 32 + lane;
    const uint32_t* sa = reinterpret_cast<const uint32_t*>(a.scales) + tile0 * 8 + g;
    const uint4* pb = kGated ? reinterpret_cast<const uint4*>(b.packed) + tile0 * 32 + lane : nullptr;
    const uint32_t* sb = kGated ? reinterpret_cast<const uint32_t*>(b.scales) + tile0 * 8 + g : nullptr;
    for (int r0 = begin; r0 < end; r0 += kTokens) {
      const int nrows = min(kTokens, end - r0);
      const bool row_lo = g < nrows, row_hi = g + 8 < nrows;
      const float* x_lo = x + int64_t(r0 + g) * cols + 8 * t;
      const float* x_hi = x + int64_t(r0 + g + 8) * cols + 8 * t;
      float acc_a[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc_b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int c0 = warp; c0 < chunks; c0 += kWarps * kBatch) {
        uint4 qa[kBatch], qb[kBatch];
        uint32_t ska[kBatch], skb[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int c = c0 + j * kWarps;
          if (c < chunks) {
            qa[j] = load_stream(pa + c * 32);
            ska[j] = __ldg(sa + c * 8);
            if constexpr (kGated) {
              qb[j] = load_stream(pb + c * 32);
              skb[j] = __ldg(sb + c * 8);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int c = c0 + j * kWarps;
          if (c >= chunks) break;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t col = int64_t(c) * 128 + 32 * i;
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 l0 = zero, l1 = zero, h0 = zero, h1 = zero;
            if (row_lo) l0 = __ldg(reinterpret_cast<const float4*>(x_lo + col)), l1 = __ldg(reinterpret_cast<const float4*>(x_lo + col + 4));
            if (row_hi) h0 = __ldg(reinterpret_cast<const float4*>(x_hi + col)), h1 = __ldg(reinterpret_cast<const float4*>(x_hi + col + 4));
            const uint32_t x0[4] = {pack_bf16x2(l0.x, l0.y), pack_bf16x2(h0.x, h0.y), pack_bf16x2(l0.z, l0.w), pack_bf16x2(h0.z, h0.w)};
            const uint32_t x1[4] = {pack_bf16x2(l1.x, l1.y), pack_bf16x2(h1.x, h1.y), pack_bf16x2(l1.z, l1.w), pack_bf16x2(h1.z, h1.w)};
            uint32_t w[4];
            dequant_word<kWide>(word_of(qa[j], i), (ska[j] >> (8 * i)) & 0xffu, w);
            mma_bf16(acc_a, x0, w[0], w[1]);
            mma_bf16(acc_a, x1, w[2], w[3]);
            if constexpr (kGated) {
              dequant_word<kWide>(word_of(qb[j], i), (skb[j] >> (8 * i)) & 0xffu, w);
              mma_bf16(acc_b, x0, w[0], w[1]);
              mma_bf16(acc_b, x1, w[2], w[3]);
            }
          }
        }
      }
      // Accumulator (token g or g + 8, rows 2t, 2t + 1) -> shared, then one thread per
      // (token, row) adds the warps' parts in warp order.
      s_red[warp][0][g][2 * t] = acc_a[0];
      s_red[warp][0][g][2 * t + 1] = acc_a[1];
      s_red[warp][0][g + 8][2 * t] = acc_a[2];
      s_red[warp][0][g + 8][2 * t + 1] = acc_a[3];
      if constexpr (kGated) {
        s_red[warp][kGated ? 1 : 0][g][2 * t] = acc_b[0];
        s_red[warp][kGated ? 1 : 0][g][2 * t + 1] = acc_b[1];
        s_red[warp][kGated ? 1 : 0][g + 8][2 * t] = acc_b[2];
        s_red[warp][kGated ? 1 : 0][g + 8][2 * t + 1] = acc_b[3];
      }
      __syncthreads();
      if (threadIdx.x < kTokens * 8) {
        const int tok = threadIdx.x / 8, r = threadIdx.x % 8;
        if (tok < nrows) {
          float va = 0.0f, vb = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) {
            va += s_red[w][0][tok][r];
            if constexpr (kGated) vb += s_red[w][kGated ? 1 : 0][tok][r];
          }
          y[int64_t(r0 + tok) * a.rows + int64_t(n) * 8 + r] = kGated ? act(va, vb) : va;
        }
      }
      __syncthreads();
    }
  }
}


// ---- Staged variant: for cols <= kWarps * kBatch * 128 (one load batch per unit, K3's
// 3584 and 3072). Each unit's weights stay in registers across its row passes, the next
// unit's weights are loaded while this one computes (two register sets, ping-pong), and
// the unit's activation rows are staged once in shared memory as bf16 (8 rows a pass), so
// the MMAs wait on shared-memory loads only, not on one L2 round trip per word. A unit is
// two 8-row tiles: gate and up of the same rows (kGatedPair), or two adjacent tiles of one
// matrix (kPair, the down projection: twice the bytes in flight per unit).
constexpr int kStagedRows = 8;

enum StagedMode { kSingle = 0, kGatedPair = 1, kPair = 2 };  // kSingle: kept for shapes without pairs

template <int kMode>
struct UnitRegs {
  uint4 qa[kBatch], qb[kMode == kSingle ? 1 : kBatch];
  uint32_t ska[kBatch], skb[kMode == kSingle ? 1 : kBatch];
};

struct UnitSpace {
  const int* list;
  int tiles, chunks, per_expert;  // per_expert: units of one expert
};

template <int kMode>
__device__ __forceinline__ void unit_at(const UnitSpace& sp, int64_t u, int* e, int* n) {
  *e = sp.list[u / sp.per_expert];
  *n = static_cast<int>(u % sp.per_expert) * (kMode == kPair ? 2 : 1);
}

template <int kMode>
__device__ __forceinline__ void load_unit(const Mxfp4Decode& a, const Mxfp4Decode& b, const UnitSpace& sp, int64_t u, int lane, int warp,
                                          UnitRegs<kMode>& r) {
  int e, n;
  unit_at<kMode>(sp, u, &e, &n);
  const int64_t tile0 = (int64_t(e) * sp.tiles + n) * sp.chunks;
  const int64_t tile_b = kMode == kPair ? tile0 + sp.chunks : tile0;  // the next tile, or the same tile of b
  const Mxfp4Decode& mb = kMode == kPair ? a : b;
  const int g = lane >> 2;
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int c = warp + j * kWarps;
    if (c < sp.chunks) {
      r.qa[j] = load_stream(reinterpret_cast<const uint4*>(a.packed) + (tile0 + c) * 32 + lane);
      r.ska[j] = __ldg(reinterpret_cast<const uint32_t*>(a.scales) + (tile0 + c) * 8 + g);
      if constexpr (kMode != kSingle) {
        r.qb[j] = load_stream(reinterpret_cast<const uint4*>(mb.packed) + (tile_b + c) * 32 + lane);
        r.skb[j] = __ldg(reinterpret_cast<const uint32_t*>(mb.scales) + (tile_b + c) * 8 + g);
      }
    }
  }
}

template <int kMode, bool kWide>
__device__ __forceinline__ void compute_unit(const Mxfp4Decode& a, const UnitSpace& sp, int64_t u, const int32_t* __restrict__ offsets,
                                             const float* __restrict__ x, float* __restrict__ y, const MoeAct& act, const UnitRegs<kMode>& r,
                                             uint16_t* x_s, float (*s_red)[2][kStagedRows][8]) {
  constexpr bool kTwo = kMode != kSingle;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  int e, n;
  unit_at<kMode>(sp, u, &e, &n);
  const int begin = offsets[e], end = offsets[e + 1];
  const int64_t cols = a.cols, stride = cols + kStagedPad;
  for (int r0 = begin; r0 < end; r0 += kStagedRows) {
    const int nrows = min(kStagedRows, end - r0);
    stage_rows<false>(x, r0, nrows, static_cast<uint32_t>(cols), static_cast<uint32_t>(stride), x_s, threadIdx.x, kThreads);
    __syncthreads();
    const bool row_lo = g < nrows;
    float acc_a[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc_b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = warp + j * kWarps;
      if (c >= sp.chunks) break;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t col = int64_t(c) * 128 + 32 * i + 8 * t;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row_lo) v = *reinterpret_cast<const uint4*>(x_s + g * stride + col);
        const uint32_t x0[4] = {v.x, 0u, v.y, 0u}, x1[4] = {v.z, 0u, v.w, 0u};
        uint32_t w[4];
        dequant_word<kWide>(word_of(r.qa[j], i), (r.ska[j] >> (8 * i)) & 0xffu, w);
        mma_bf16(acc_a, x0, w[0], w[1]);
        mma_bf16(acc_a, x1, w[2], w[3]);
        if constexpr (kTwo) {
          dequant_word<kWide>(word_of(r.qb[j], i), (r.skb[j] >> (8 * i)) & 0xffu, w);
          mma_bf16(acc_b, x0, w[0], w[1]);
          mma_bf16(acc_b, x1, w[2], w[3]);
        }
      }
    }
    s_red[warp][0][g][2 * t] = acc_a[0];  // acc[2], acc[3]: MMA rows 8..15, no tokens
    s_red[warp][0][g][2 * t + 1] = acc_a[1];
    if constexpr (kTwo) {
      s_red[warp][1][g][2 * t] = acc_b[0];
      s_red[warp][1][g][2 * t + 1] = acc_b[1];
    }
    __syncthreads();
    // (token, row) per thread; kPair's second tile is rows 8..15 of the unit.
    const int half = threadIdx.x / (kStagedRows * 8), tok = (threadIdx.x / 8) % kStagedRows, rr = threadIdx.x % 8;
    if (half < (kMode == kPair ? 2 : 1) && tok < nrows) {
      float va = 0.0f, vb = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        va += s_red[w][half][tok][rr];
        if constexpr (kMode == kGatedPair) vb += s_red[w][1][tok][rr];
      }
      y[int64_t(r0 + tok) * a.rows + int64_t(n + half) * 8 + rr] = kMode == kGatedPair ? act(va, vb) : va;
    }
    __syncthreads();  // x_s and s_red are reused by the next pass
  }
}

template <int kMode, bool kWide>
__global__ void __launch_bounds__(kThreads, 2) decode_gemm_staged(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets,
                                                                  int experts, const float* __restrict__ x, float* __restrict__ y, MoeAct act) {
  extern __shared__ __align__(16) uint16_t x_s[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_red[kWarps][2][kStagedRows][8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  list_touched_experts(offsets, experts, s_list, &s_count);
  __syncthreads();
  const int tiles = static_cast<int>(a.rows / 8);
  const UnitSpace sp{s_list, tiles, static_cast<int>(a.cols / 128), kMode == kPair ? tiles / 2 : tiles};
  const int64_t units = int64_t(s_count) * sp.per_expert, step = gridDim.x;
  ping_pong<UnitRegs<kMode>>(
      int64_t(blockIdx.x), units, step, [&](int64_t u, UnitRegs<kMode>& r) { load_unit<kMode>(a, b, sp, u, lane, warp, r); },
      [&](int64_t u, const UnitRegs<kMode>& r) { compute_unit<kMode, kWide>(a, sp, u, offsets, x, y, act, r, x_s, s_red); }, [](int64_t) {});
}

// ---- Weights-on-A variant (kWeightsA): mma.m16n8k16 with 16 weight rows as A and 8
// tokens as B. Two adjacent 8-row tiles of the layout make one A operand unchanged: lane
// (g, t)'s word of tile n gives a0/a2 (row g), tile n+1's the same word a1/a3 (row g + 8),
// both with the layout's k-slot map, and the token operand is the 8 bf16 inputs that lane
// already reads (one 16-byte shared load, no zero half, no register moves). Half the MMAs
// per weight of the token-side kernels. A unit is four tiles: gate n, n+1 and up n, n+1
// (gated) or four adjacent tiles (down); 16 warps take at most 2 chunks each, and the next
// unit's words load while this one computes (two register sets). Offsets are 32-bit.
// kBlocked: each CTA takes a contiguous run of units (mostly one expert), so the staged
// token rows are reused across units instead of re-read from L2 behind a barrier; else
// CTAs stride over the units (the first schedule, kWeightsAStrided). kPrefetch: four
// threads ask the TMA unit to pull the unit after next into L2 (one bulk prefetch per
// contiguous run: packed and scales of each matrix), so the register loads of the next
// unit wait on L2 rather than DRAM and DRAM sees more requests in flight. The reduction buffer
// alternates between passes, so a pass needs one barrier (two where it restages tokens).
constexpr int kWaThreads = kWaWarps * 32;
constexpr int kWaBatch = 2;   // chunks per warp: 16 x 2 x 128 = 4096 inputs

struct WaRegs {
  uint4 q[kWaBatch][4];
  uint32_t s[kWaBatch][4];
};

// Tile k of the unit: gated k = 0, 1 gate n, n+1 and k = 2, 3 up n, n+1; down n + k.
template <bool kGated, int kSplit = 1>
__device__ __forceinline__ void wa_load(const Mxfp4Decode& a, const Mxfp4Decode& b, const WaSpace& sp, uint32_t u, int lane, int warp,
                                        WaRegs& r) {
  int e;
  uint32_t n, h, cb, ce;
  wa_unit<kGated, kSplit>(sp, u, &e, &n, &h);
  wa_slice<kSplit>(sp.chunks, h, &cb, &ce);
  const uint32_t tile0 = (uint32_t(e) * sp.tiles + n) * sp.chunks, g = lane >> 2;
  // One pointer a tile at the warp's first chunk; chunk j is a constant kWaWarps * j tiles on
  // (an immediate offset: the address math is per unit, not per load).
  const uint4* pq[4];
  const uint32_t* ps[4];
  const uint32_t c0 = cb + warp;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const Mxfp4Decode& m = kGated && k >= 2 ? b : a;
    const uint32_t tile = tile0 + uint32_t(kGated ? (k & 1) : k) * sp.chunks + c0;
    pq[k] = reinterpret_cast<const uint4*>(m.packed) + (tile * 32u + lane);
    ps[k] = reinterpret_cast<const uint32_t*>(m.scales) + (tile * 8u + g);
  }
#pragma unroll
  for (int j = 0; j < kWaBatch; ++j) {
    if (c0 + j * kWaWarps < ce) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        r.q[j][k] = load_stream(pq[k] + j * kWaWarps * 32);
        r.s[j][k] = __ldg(ps[k] + j * kWaWarps * 8);
      }
    }
  }
}

// Down with kSplit > 1: x is the gate/up launch's partial sums, [row][slice][gate | up][cols]
// fp32; staging adds the slices in slice order, applies the activation (so it acts on the full
// K sum), writes the result to act_out (the contract's act) and stages it as bf16.
template <int kSplit>
__device__ __forceinline__ void stage_act_rows(const float* part, int64_t r0, uint32_t nrows, uint32_t cols, uint32_t stride,
                                               uint16_t* x_s, uint32_t tid, uint32_t nthreads, const MoeAct& act, float* act_out) {
  const uint32_t c4n = cols / 4, n4 = nrows * c4n;
  for (uint32_t idx = tid; idx < n4; idx += nthreads) {
    const uint32_t row = idx / c4n, c4 = idx - row * c4n;
    const int64_t rr = r0 + row;
    float4 gs = make_float4(0.0f, 0.0f, 0.0f, 0.0f), us = gs;
#pragma unroll
    for (int h = 0; h < kSplit; ++h) {
      const float4* p = reinterpret_cast<const float4*>(part + (rr * kSplit + h) * 2 * int64_t(cols)) + c4;
      const float4 gv = __ldcg(p), uv = __ldcg(p + c4n);
      gs.x += gv.x, gs.y += gv.y, gs.z += gv.z, gs.w += gv.w;
      us.x += uv.x, us.y += uv.y, us.z += uv.z, us.w += uv.w;
    }
    const float4 v = make_float4(act(gs.x, us.x), act(gs.y, us.y), act(gs.z, us.z), act(gs.w, us.w));
    reinterpret_cast<float4*>(act_out + rr * cols)[c4] = v;
    *reinterpret_cast<uint2*>(x_s + row * stride + 4 * c4) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  }
}

template <bool kGated, bool kWide, int kSplit = 1, bool kF32 = false>
__device__ __forceinline__ void wa_compute(const Mxfp4Decode& a, const WaSpace& sp, uint32_t u, const int32_t* __restrict__ offsets,
                                           const float* __restrict__ x, float* __restrict__ y, const MoeAct& act, const WaRegs& r,
                                           uint16_t* x_s, float (*s_red2)[kWaWarps][4][kWaTokens][8], int& staged_e, int& staged_r0, int& buf,
                                           float* act_out = nullptr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  int e;
  uint32_t n, h, cb, ce;
  wa_unit<kGated, kSplit>(sp, u, &e, &n, &h);
  wa_slice<kSplit>(sp.chunks, h, &cb, &ce);
  const int begin = offsets[e], end = offsets[e + 1];
  const uint32_t cols = static_cast<uint32_t>(a.cols), stride = cols + kStagedPad;
  for (int r0 = begin; r0 < end; r0 += kWaTokens) {
    const int nrows = min(kWaTokens, end - r0);
    if (staged_e != e || staged_r0 != r0) {  // uniform; the last pass's barrier ended all x_s reads
      if constexpr (!kGated && kSplit > 1)
        stage_act_rows<kSplit>(x, r0, nrows, cols, stride, x_s, threadIdx.x, kWaThreads, act, act_out);
      else
        stage_rows<false, kF32 && !kWide>(x, r0, nrows, cols, stride, x_s, threadIdx.x, kWaThreads);
      staged_e = e, staged_r0 = r0;
      __syncthreads();
    }
    float (*s_red)[4][kWaTokens][8] = s_red2[buf];
    buf ^= 1;
    const bool tok_ok = g < nrows;
    const uint16_t* xg = x_s + g * stride + 8 * t;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    if constexpr (kWide) {
#pragma unroll
      for (int j = 0; j < kWaBatch; ++j) {
        const uint32_t c = cb + warp + j * kWaWarps;
        if (c >= ce) break;
        wa_chunk<kWide>(r.q[j], r.s[j], xg + c * 128, tok_ok, acc);
      }
    } else if constexpr (kF32) {  // kWeightsAPdlF32: the scale on fp32 sums of a group pair
#pragma unroll
      for (int j = 0; j < kWaBatch; ++j) {
        const uint32_t c = cb + warp + j * kWaWarps;
        if (c >= ce) break;
        wa_chunk_f32(r.q[j], r.s[j], xg + c * 128, acc);
      }
    } else {  // moedec11: multipliers a scale word, unguarded token loads, four MMA chains
      float acc2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int j = 0; j < kWaBatch; ++j) {
        const uint32_t c = cb + warp + j * kWaWarps;
        if (c >= ce) break;
        wa_chunk_narrow(r.q[j], r.s[j], xg + c * 128, acc, acc2);
      }
#pragma unroll
      for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[p][q] += acc2[p][q];
    }
    wa_store_partials(acc, s_red[warp], g, t);
    __syncthreads();
    const int k = threadIdx.x / (kWaTokens * 8), tok = (threadIdx.x / 8) % kWaTokens, rr = threadIdx.x % 8;
    if (k < (kGated ? 2 : 4) && tok < nrows) {
      float va = 0.0f, vb = 0.0f;
#pragma unroll
      for (int w = 0; w < kWaWarps; ++w) {
        va += s_red[w][k][tok][rr];
        if constexpr (kGated) vb += s_red[w][k + 2][tok][rr];
      }
      const int64_t col = int64_t(n + k) * 8 + rr;
      if constexpr (kSplit == 1) {
        y[int64_t(r0 + tok) * a.rows + col] = kGated ? act(va, vb) : va;
      } else if constexpr (kGated) {  // partial sums of slice h: summed and activated by the down launch
        float* p = y + (int64_t(r0 + tok) * kSplit + h) * 2 * a.rows + col;
        p[0] = va;
        p[a.rows] = vb;
      } else {
        atomicAdd(y + int64_t(r0 + tok) * a.rows + col, va);  // onto the zeros gate/up stored: kSplit = 2 sums are order-free
      }
    }
  }
}

// kPhases (kWeightsAPdl, kWeightsAPdlL2*; blocked, no prefetch): the gate/up launch lets the
// down launch start at once (griddepcontrol.launch_dependents) and the down launch is a
// programmatic dependent one: its CTAs take SMs as gate/up CTAs leave, list the experts
// (offsets come from a kernel that finished before gate/up began), issue the register loads
// of their first two units, and only then wait (griddepcontrol.wait) for gate/up's
// activations; every down CTA waits, work or not. kL2 (gate/up only): when a gate/up CTA has
// issued its last weight load it asks the TMA unit to pull the first two units of the down
// CTA with its index into L2 (`next`, `next_grid`: the down matrix and grid), so the down
// launch's first wave, what its CTAs wait on, reads L2 while DRAM would otherwise idle through
// gate/up's last units. That is at most 2 x 52 KB a CTA (K3), 14 MB in all, whatever the batch
// (kL2All: up to all of the CTA's units, 24 MiB in all).
enum WaPhases { kPlain = 0, kPhases = 1 };

// kSplit > 1 (kWeightsAPdlSplitK, with kPhases): both launches split each unit's K into kSplit
// slices, so a CTA's run of units is finer grained. Gate/up (y = the partial-sum workspace)
// stores each slice's sums and zeroes rows [offsets[0], offsets[experts]) of the output
// (aux = out, next.rows = its width); down (x = that workspace, aux = act) sums the slices
// and applies the activation when it stages a row, and adds its partial outputs atomically.
// kStagger (kWeightsAPdl*Stagger, gate/up only): a warp issues its second unit's loads only once
// its first unit's words have landed (wa_settle), so the launch's first wave of requests is one
// unit an SM (8 MB at K3's shape) rather than two and the first unit lands about twice as soon;
// the second still loads during the first's MMAs, as before.
__device__ __forceinline__ void wa_settle(const WaRegs& r, uint32_t chunks, int warp, uint32_t* sink) {
  uint32_t x = 0;
#pragma unroll
  for (int j = 0; j < kWaBatch; ++j)
    if (uint32_t(warp + j * kWaWarps) < chunks) {  // only the words wa_load filled (kSplit == 1: chunks [0, chunks))
#pragma unroll
      for (int k = 0; k < 4; ++k) x ^= r.q[j][k].x ^ r.q[j][k].y ^ r.q[j][k].z ^ r.q[j][k].w ^ r.s[j][k];
    }
  // The store needs every word (a scoreboard wait on the loads); the fence keeps the next
  // unit's loads from being scheduled above it.
  *reinterpret_cast<volatile uint32_t*>(sink) = x;
  __threadfence_block();
}

template <bool kGated, bool kWide, bool kBlocked, bool kPrefetch, int kPdl = kPlain, int kL2 = kL2None, int kSplit = 1, bool kF32 = false,
          bool kStagger = false>
__global__ void __launch_bounds__(kWaThreads, 1) decode_gemm_wa(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets,
                                                                int experts, const float* __restrict__ x, float* __restrict__ y, MoeAct act,
                                                                Mxfp4Decode next, uint32_t next_grid, float* aux) {
  extern __shared__ __align__(16) uint16_t x_s[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_red[2][kWaWarps][4][kWaTokens][8];
  __shared__ uint32_t s_sink[kStagger ? kWaWarps : 1];
  static_assert(!kStagger || kSplit == 1, "wa_settle reads the chunks of an unsplit unit");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (kPdl == kPhases && kGated) pdl_bulk::pdl_trigger();  // the down launch may be scheduled now
  list_touched_experts(offsets, experts, s_list, &s_count);
  __syncthreads();
  const uint32_t tiles = static_cast<uint32_t>(a.rows / 8);
  if constexpr (kGated && kSplit > 1) {  // the down launch adds into these only after its griddepcontrol.wait
    const int64_t lo = int64_t(offsets[0]) * next.rows / 4, hi = int64_t(offsets[experts]) * next.rows / 4;
    float4* o = reinterpret_cast<float4*>(aux);
    for (int64_t i = lo + int64_t(blockIdx.x) * kWaThreads + threadIdx.x; i < hi; i += int64_t(gridDim.x) * kWaThreads)
      o[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const WaSpace sp{s_list, tiles, static_cast<uint32_t>(a.cols / 128), (kGated ? tiles / 2 : tiles / 4) * kSplit};
  const uint32_t all = uint32_t(s_count) * sp.per_expert, per = (all + gridDim.x - 1) / gridDim.x;
  const uint32_t step = kBlocked ? 1u : gridDim.x;
  uint32_t u = kBlocked ? blockIdx.x * per : blockIdx.x;
  const uint32_t units = kBlocked ? min(all, u + per) : all;
  constexpr bool kWaits = kPdl == kPhases && !kGated;
  if (kL2 != kL2None && kGated && u >= units) wa_prefetch_next_start<kL2>(next, s_list, s_count, next_grid, threadIdx.x);  // idle CTA
  bool waited = false;
  int staged_e = -1, staged_r0 = -1, buf = 0;  // the (expert, first row) in x_s; the s_red half to use
  ping_pong<WaRegs>(
      u, units, step, [&](uint32_t v, WaRegs& r) { wa_load<kGated, kSplit>(a, b, sp, v, lane, warp, r); },
      [&](uint32_t v, const WaRegs& r) {
        if (kWaits && !waited) pdl_bulk::pdl_wait(), waited = true;  // both units' loads are out: now x may be read
        wa_compute<kGated, kWide, kSplit, kF32>(a, sp, v, offsets, x, y, act, r, x_s, s_red, staged_e, staged_r0, buf, aux);
      },
      [&](uint32_t v) {
        if (kPrefetch && threadIdx.x < 4 && v + 2 * step < units) wa_prefetch<kGated>(a, b, sp, v + 2 * step, threadIdx.x);
        if (kL2 != kL2None && kGated && v + step >= units) wa_prefetch_next_start<kL2>(next, s_list, s_count, next_grid, threadIdx.x);
      },
      [&](uint32_t, const WaRegs& r) {
        if constexpr (kStagger) wa_settle(r, sp.chunks, warp, &s_sink[warp]);
      });
  if (kWaits && !waited) pdl_bulk::pdl_wait();  // no work: still complete only after gate/up
}

Status check(const Mxfp4Decode& m, int64_t rows, int64_t cols, const char* what) {
  if (!m.packed || !m.scales || m.rows != rows || m.cols != cols || !decode_layout_fits(rows, cols))
    return invalid_argument(std::string("moe_expert_mlp_decode: bad shape for ") + what + " (rows % 8, cols % 128)");
  if (rows / 8 > INT32_MAX / 4 || cols / 128 > INT32_MAX / 4) return invalid_argument("moe_expert_mlp_decode: matrix too large");
  return Status::ok();
}

template <bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, const float* x, float* y, MoeAct act,
              MoeDecodeKernel kind, cudaStream_t stream, const char* what) {
  const int64_t tiles = a.rows / 8;
  // Every kernel here shares one signature: size the grid (cached), launch, check.
  auto run = [&](auto kernel, int threads, size_t smem, int64_t max_units, const Mxfp4Decode& ka, const Mxfp4Decode& kb) -> Status {
    PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, smem, max_units, threads));
    kernel<<<grid, threads, smem, stream>>>(ka, kb, offsets, static_cast<int>(experts), x, y, act);
    return last_launch_status(what);
  };
  if (kind == MoeDecodeKernel::kWeightsA || kind == MoeDecodeKernel::kWeightsANoPrefetch || kind == MoeDecodeKernel::kWeightsAStrided) {
    const size_t smem = size_t(kWaTokens) * (a.cols + kStagedPad) * sizeof(uint16_t);
    const int64_t units = experts * (kGated ? tiles / 2 : tiles / 4);
    auto run_wa = [&](auto kernel) -> Status {
      PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(kernel, smem, units, kWaThreads));
      kernel<<<grid, kWaThreads, smem, stream>>>(a, b, offsets, static_cast<int>(experts), x, y, act, a, 0u, nullptr);
      return last_launch_status(what);
    };
    if (kind == MoeDecodeKernel::kWeightsA) return run_wa(decode_gemm_wa<kGated, kWide, true, true>);
    if (kind == MoeDecodeKernel::kWeightsANoPrefetch) return run_wa(decode_gemm_wa<kGated, kWide, true, false>);
    return run_wa(decode_gemm_wa<kGated, kWide, false, false>);
  }
  if (kind == MoeDecodeKernel::kStaged) {
    const size_t smem = size_t(kStagedRows) * (a.cols + kStagedPad) * sizeof(uint16_t);
    if constexpr (kGated) return run(decode_gemm_staged<kGatedPair, kWide>, kThreads, smem, experts * tiles, a, b);
    return run(decode_gemm_staged<kPair, kWide>, kThreads, smem, experts * tiles / 2, a, a);  // down: rows % 128 == 0, tiles pair up
  }
  return run(decode_gemm<kGated, kWide>, kThreads, 0, experts * tiles, a, b);
}

// kWeightsAPdl / kWeightsAPdlL2: the blocked gate/up launch, then down as a programmatic
// dependent launch (decode_gemm_wa's kPhases). The down grid is sized first: with kL2 the
// gate/up CTAs prefetch the down CTAs' first units by index.
// kWeightsAPdlSplitK (kS > 1): each unit's K split in kS (decode_gemm_wa's kSplit): gate/up's
// partial sums go to `part` (the workspace past the queue words) and it zeroes `out`; the down
// launch activates them as it stages rows, writes `act` and adds its halves into `out`. Nothing
// runs on the host between the launches (graph-safe).
template <bool kWideGate, bool kWideDown, int kL2, int kS, bool kF32 = false, bool kStagger = false>
Status launch_wa_phases(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                        const MoeAct& fn, cudaStream_t stream, float* part) {
  const auto gate = decode_gemm_wa<true, kWideGate, true, false, kPhases, kL2, kS, kF32, kStagger>;
  const auto down = decode_gemm_wa<false, kWideDown, true, false, kPhases, kL2None, kS, kF32>;
  const size_t smem_g = size_t(kWaTokens) * (w.w1.cols + kStagedPad) * sizeof(uint16_t);
  const size_t smem_d = size_t(kWaTokens) * (w.w2.cols + kStagedPad) * sizeof(uint16_t);
  PDS_ASSIGN_OR_RETURN(unsigned grid_g, grid_for(gate, smem_g, experts * (w.w1.rows / 16) * kS, kWaThreads));
  PDS_ASSIGN_OR_RETURN(unsigned grid_d, grid_for(down, smem_d, experts * (w.w2.rows / 32) * kS, kWaThreads));
  // Split: gate/up writes the partial sums and zeroes `out`; down reads them and writes `act`.
  float* gate_out = kS > 1 ? part : act;
  gate<<<grid_g, kWaThreads, smem_g, stream>>>(w.w1, w.w3, offsets, static_cast<int>(experts), x, gate_out, fn, w.w2, grid_d,
                                               kS > 1 ? out : nullptr);
  PDS_RETURN_IF_ERROR(last_launch_status("moe decode gate/up"));
  PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, down, dim3(grid_d), dim3(kWaThreads), smem_d, stream, w.w2, w.w2, offsets,
                                                       static_cast<int>(experts), static_cast<const float*>(gate_out), out, fn, w.w2, 0u,
                                                       kS > 1 ? act : nullptr),
                                  "moe decode down launch"));
  return last_launch_status("moe decode down");
}

template <int kL2, int kS = 1, bool kF32 = false, bool kStagger = false>
Status launch_wa_phases_any(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                            const MoeAct& fn, cudaStream_t stream, float* part = nullptr) {
  const bool wg = w.w1.wide_scales || w.w3.wide_scales, wd = w.w2.wide_scales;
  if (wg) return wd ? launch_wa_phases<true, true, kL2, kS, kF32, kStagger>(w, offsets, experts, x, act, out, fn, stream, part)
                    : launch_wa_phases<true, false, kL2, kS, kF32, kStagger>(w, offsets, experts, x, act, out, fn, stream, part);
  return wd ? launch_wa_phases<false, true, kL2, kS, kF32, kStagger>(w, offsets, experts, x, act, out, fn, stream, part)
            : launch_wa_phases<false, false, kL2, kS, kF32, kStagger>(w, offsets, experts, x, act, out, fn, stream, part);
}

}  // namespace

namespace {

struct Fits {
  bool fits, wa, fused;
};

Fits shape_fits(const MoeDecodeWeights& w, int64_t local_experts) {
  const int64_t inter = w.w1.rows, dim = w.w1.cols;
  const int64_t max_cols = int64_t(kWarps) * kBatch * 128;
  Fits f{};
  f.fits = dim <= max_cols && inter <= max_cols;
  // kWeightsA: 16-row gate/up pairs and 32-row down units, 32-bit word indices.
  f.wa = f.fits && inter % 16 == 0 && dim % 32 == 0 && local_experts * inter * dim / 32 < INT32_MAX;
  f.fused = f.wa && decode_fused_fits(dim, inter);
  return f;
}

bool is_fused(MoeDecodeKernel k) {
  return k == MoeDecodeKernel::kFused || k == MoeDecodeKernel::kFusedSplit || k == MoeDecodeKernel::kFusedSplitPdl ||
         k == MoeDecodeKernel::kFusedSplit24Warps || k == MoeDecodeKernel::kFusedSplit24WarpsStaggered ||
         k == MoeDecodeKernel::kFusedSplitStaggered;
}

bool is_ring(MoeDecodeKernel k) {
  return k == MoeDecodeKernel::kWeightsAPdlRing || k == MoeDecodeKernel::kWeightsAPdlRingL2 || k == MoeDecodeKernel::kWeightsAPdlRing1 ||
         k == MoeDecodeKernel::kWeightsAPdlRing1L2;
}

// kAuto, from the H200 measurements (docs/perf.md): the fused kernel from
// kMoeDecodeFusedMinCapacity pairs where it fits and the caller gave it a queue workspace;
// else weights on A wherever its shape rules hold: below that (B <= 192 at top-16) the blocked
// two launches with the down launch a programmatic dependent one (moedec9: 1.04-1.14x the
// plain blocked form at B 1-48), the down weights' first units pulled into L2 during gate/up's
// last units up to kMoeDecodeL2MaxCapacity pairs, and above that the form with the scale on
// fp32 sums (kWeightsAPdlF32, moedec11: 1.008-1.024x kWeightsAPdl at B 16-192); from
// kMoeDecodeFusedMinCapacity without a workspace, strided. Elsewhere staged up to 1024 pairs,
// else streamed.
MoeDecodeKernel resolve(const Fits& f, int64_t capacity, bool has_workspace) {
  // kFusedSplit: 1.015-1.028x kFused at B = 64-256 (moedec4), 1.019-1.023x in moedec6's call,
  // whose test ran it at K3's shape at B = 1, 4 and 64 on the GPU; since moedec11's step the
  // PDL forms beat it at B = 64-192 (1.06-1.12x), not at 256 (0.53x).
  if (f.fused && has_workspace && capacity >= kMoeDecodeFusedMinCapacity) return MoeDecodeKernel::kFusedSplit;
  if (f.wa) {
    if (capacity <= kMoeDecodeL2MaxCapacity) return MoeDecodeKernel::kWeightsAPdlL2;
    return capacity < kMoeDecodeFusedMinCapacity ? MoeDecodeKernel::kWeightsAPdlF32 : MoeDecodeKernel::kWeightsAStrided;
  }
  return f.fits && capacity <= 1024 ? MoeDecodeKernel::kStaged : MoeDecodeKernel::kStreamed;
}

bool fp8_bits(const MoeDecodeWeights& w) {
  return w.w1.bits == Mxfp4DecodeBits::kFp8 && w.w3.bits == Mxfp4DecodeBits::kFp8 && w.w2.bits == Mxfp4DecodeBits::kFp8;
}
// kAuto on kFp8 weights: the 64-row form from kMoeDecodeQgmmaWideMinCapacity pairs where its shape
// rules hold, else the chunk-pair form.
MoeDecodeKernel fp8_choice(const MoeDecodeWeights& w, int64_t capacity) {
  const bool wide_fits = w.w1.rows % 32 == 0 && w.w2.rows % 64 == 0;
  return wide_fits && capacity >= kMoeDecodeQgmmaWideMinCapacity ? MoeDecodeKernel::kWeightsAPdlQgmmaWide : MoeDecodeKernel::kWeightsAPdlQgmma;
}

bool bf16_bits(const MoeDecodeWeights& w) {
  return w.w1.bits == Mxfp4DecodeBits::kBf16 && w.w3.bits == Mxfp4DecodeBits::kBf16 && w.w2.bits == Mxfp4DecodeBits::kBf16;
}

}  // namespace

MoeDecodeKernel moe_decode_choice(const MoeDecodeWeights& w, int64_t local_experts, int64_t capacity, bool has_workspace,
                                  MoeDecodeKernel kernel) {
  if (kernel != MoeDecodeKernel::kAuto) return kernel;
  if (fp8_bits(w)) return fp8_choice(w, capacity);  // the E4M3 forms are the ones that read the kFp8 shuffle
  return resolve(shape_fits(w, local_experts), capacity, has_workspace);
}

Status moe_expert_mlp_decode(const MoeDecodeWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                             const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream, MoeDecodeKernel kernel,
                             MoeDecodeWorkspace workspace) {
  const int64_t inter = w.w1.rows, dim = w.w1.cols;
  PDS_RETURN_IF_ERROR(check(w.w1, inter, dim, "w1"));
  PDS_RETURN_IF_ERROR(check(w.w3, inter, dim, "w3"));
  PDS_RETURN_IF_ERROR(check(w.w2, dim, inter, "w2"));
  if (local_experts <= 0 || local_experts > kMaxExperts) return invalid_argument("moe_expert_mlp_decode: local_experts must be 1..1024");
  const bool has_workspace = workspace.data != nullptr;
  if (has_workspace && workspace.bytes < moe_decode_workspace_bytes(local_experts))
    return invalid_argument("moe_expert_mlp_decode: workspace smaller than moe_decode_workspace_bytes(local_experts)");
  const bool fp8 = fp8_bits(w);
  if (!fp8 && !bf16_bits(w)) return invalid_argument("moe_expert_mlp_decode: w1, w3 and w2 must share one Mxfp4DecodeBits");
  const bool q_form = kernel == MoeDecodeKernel::kWeightsAPdlQgmma || kernel == MoeDecodeKernel::kWeightsAPdlQgmmaWide;
  if (fp8 && kernel != MoeDecodeKernel::kAuto && !q_form)
    return invalid_argument("moe_expert_mlp_decode: weights in the kFp8 bit shuffle run the E4M3 forms (or kAuto) only");
  if (!fp8 && q_form) return invalid_argument("moe_expert_mlp_decode: the E4M3 forms need weights repacked with Mxfp4DecodeBits::kFp8");
  if (capacity == 0) return Status::ok();
  const Fits f = shape_fits(w, local_experts);
  if (fp8) {
    if (!f.wa) return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmma takes cols <= 4096, inter % 16 == 0, dim % 32 == 0");
    const MoeAct fn{w.activation, w.situ_beta, w.situ_linear_beta};
    const MoeDecodeKernel kind = kernel == MoeDecodeKernel::kAuto ? fp8_choice(w, capacity) : kernel;
    if (kind == MoeDecodeKernel::kWeightsAPdlQgmmaWide) return launch_decode_qgmma_wide(w, offsets, local_experts, capacity, x_sorted, act, out_sorted, fn, stream);
    return launch_decode_qgmma(w, offsets, local_experts, x_sorted, act, out_sorted, fn, stream);
  }
  if (kernel == MoeDecodeKernel::kStaged && !f.fits) return invalid_argument("moe_expert_mlp_decode: the staged kernel takes cols <= 4096");
  const bool phases = kernel == MoeDecodeKernel::kWeightsAPdl || kernel == MoeDecodeKernel::kWeightsAPdlL2 ||
                      kernel == MoeDecodeKernel::kWeightsAPdlL2All || kernel == MoeDecodeKernel::kWeightsAPdlSplitK ||
                      kernel == MoeDecodeKernel::kWeightsAPdlF32 || kernel == MoeDecodeKernel::kWeightsAPdlL2Stagger ||
                      kernel == MoeDecodeKernel::kWeightsAPdlF32Stagger || kernel == MoeDecodeKernel::kWeightsAPdlWgmma ||
                      kernel == MoeDecodeKernel::kWeightsAPdlWgmma3 || is_ring(kernel);
  const bool wants_wa = kernel == MoeDecodeKernel::kWeightsA || kernel == MoeDecodeKernel::kWeightsANoPrefetch ||
                        kernel == MoeDecodeKernel::kWeightsAStrided || phases;
  if (wants_wa && !f.wa)
    return invalid_argument("moe_expert_mlp_decode: the weights-on-A kernel takes cols <= 4096, inter % 16 == 0, dim % 32 == 0");
  const bool wants_fused = is_fused(kernel);
  if (wants_fused && !f.fused)
    return invalid_argument("moe_expert_mlp_decode: the fused kernel takes the weights-on-A shapes with a ring that fits shared memory");
  if (wants_fused && !has_workspace)
    return invalid_argument("moe_expert_mlp_decode: the fused kernel needs a MoeDecodeWorkspace (its unit queue)");
  if (kernel == MoeDecodeKernel::kWeightsAPdlSplitK &&
      (!has_workspace || workspace.bytes < moe_decode_splitk_workspace_bytes(local_experts, capacity, inter)))
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlSplitK needs moe_decode_splitk_workspace_bytes(local, capacity, inter)");
  const MoeDecodeKernel kind = kernel == MoeDecodeKernel::kAuto ? resolve(f, capacity, has_workspace) : kernel;
  const MoeAct a{w.activation, w.situ_beta, w.situ_linear_beta};
  if (is_fused(kind))
    return launch_decode_fused(w, offsets, local_experts, x_sorted, act, out_sorted, a, static_cast<uint32_t*>(workspace.data), stream, kind);
  if (kind == MoeDecodeKernel::kWeightsAPdlSplitK) {
    float* part = reinterpret_cast<float*>(static_cast<char*>(workspace.data) + moe_decode_splitk_part_offset(local_experts));
    return launch_wa_phases_any<kL2None, kMoeDecodeSplitK>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream, part);
  }
  if (is_ring(kind)) {
    const int cpw = kind == MoeDecodeKernel::kWeightsAPdlRing1 || kind == MoeDecodeKernel::kWeightsAPdlRing1L2 ? 1 : 2;
    if (!decode_ring_fits(dim, inter, cpw)) return invalid_argument("moe_expert_mlp_decode: the ring form with one chunk a warp takes dim, inter <= 3584");
    const bool pull = kind == MoeDecodeKernel::kWeightsAPdlRingL2 || kind == MoeDecodeKernel::kWeightsAPdlRing1L2;
    return launch_decode_ring(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream, cpw, pull);
  }
  if (kind == MoeDecodeKernel::kWeightsAPdlWgmma || kind == MoeDecodeKernel::kWeightsAPdlWgmma3)
    return launch_decode_wgmma(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream, kind == MoeDecodeKernel::kWeightsAPdlWgmma3 ? 3 : 4);
  if (kind == MoeDecodeKernel::kWeightsAPdlF32)
    return launch_wa_phases_any<kL2None, 1, true>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream);
  if (kind == MoeDecodeKernel::kWeightsAPdlF32Stagger)
    return launch_wa_phases_any<kL2None, 1, true, true>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream);
  if (kind == MoeDecodeKernel::kWeightsAPdlL2Stagger)
    return launch_wa_phases_any<kL2First, 1, false, true>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream);
  if (kind == MoeDecodeKernel::kWeightsAPdl) return launch_wa_phases_any<kL2None>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream);
  if (kind == MoeDecodeKernel::kWeightsAPdlL2) return launch_wa_phases_any<kL2First>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream);
  if (kind == MoeDecodeKernel::kWeightsAPdlL2All)
    return launch_wa_phases_any<kL2All>(w, offsets, local_experts, x_sorted, act, out_sorted, a, stream);
  if (w.w1.wide_scales || w.w3.wide_scales)
    PDS_RETURN_IF_ERROR((launch<true, true>(w.w1, w.w3, offsets, local_experts, x_sorted, act, a, kind, stream, "moe decode gate/up")));
  else
    PDS_RETURN_IF_ERROR((launch<true, false>(w.w1, w.w3, offsets, local_experts, x_sorted, act, a, kind, stream, "moe decode gate/up")));
  if (w.w2.wide_scales)
    return launch<false, true>(w.w2, w.w2, offsets, local_experts, act, out_sorted, a, kind, stream, "moe decode down");
  return launch<false, false>(w.w2, w.w2, offsets, local_experts, act, out_sorted, a, kind, stream, "moe decode down");
}

}  // namespace pdserve::cuda
