// kWeightsAPdlQgmmaWide (contract: moe_decode.h; weights in Mxfp4DecodeBits::kFp8): the E4M3
// warpgroup-MMA step of kWeightsAPdlQgmma on 64-row units, so that every warp of a warpgroup works
// on the same chunk and keeps all of its accumulator (no chunk pairs, no selects, no dropped half).
//
// Unit: 8 decode-layout tiles at one expert. Gated: gate tiles n..n+3 (warps w' = 0, 1 of each
// warpgroup: tiles 2w', 2w' + 1) and up tiles n..n+3 (w' = 2, 3), 32 activation rows; down: tiles
// n..n+7 (w': 2w', 2w' + 1), 64 output rows. Warpgroup G takes chunks G, G + 4, G + 8, ... (K3: 7
// rounds at gate/up, 6 at down, equal for every warpgroup); per round and 32-input group one
// wgmma.m64n8k32 (A = the 4 warps' 16 rows each, from registers; B = the pass's 4 tokens as hi / lo
// columns, moe_decode_qgmma.cuh's staging), a fresh accumulator a group, its E8M0 scale by fp32
// multiply-add. Each (unit, block of up to 16 tokens) is an item whose up to 4 passes of 4 tokens
// share the round's dequantised A registers (one wgmma per pass and group); a warp keeps kQRing rounds of words in
// registers ahead of the one it computes, across item boundaries, so the loads of the next item
// are in flight while this one ends (its reduction through shared memory, one barrier an item).
// Down is a programmatic dependent launch: it loads its first rounds, then waits for gate/up.
#include <cstdint>
#include <type_traits>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_qgmma.cuh"
#include "moe/moe_decode_wa.cuh"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_decode_detail {

namespace {

using moe_prefill_detail::wgmma_commit;
using moe_prefill_detail::wgmma_fence;
using moe_prefill_detail::wgmma_wait;

constexpr int kQRing = 4;  // rounds of words a warp holds ahead of its compute

// d = A B (m64n8k32, E4M3, the accumulator not read).
__device__ __forceinline__ void qgmma8(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 0, 1, 1;\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
               : "memory");
}

// A completed accumulator into the warp's sums: (row g, token t) and (row g + 8, token t), hi + lo.
__device__ __forceinline__ void q8_take(float (&d)[4], float f0, float f1, float (&acc)[2]) {
  float v0 = d[0], v1 = d[1], v2 = d[2], v3 = d[3];
  asm volatile("" : "+f"(v0), "+f"(v1), "+f"(v2), "+f"(v3)::"memory");
  acc[0] = fmaf(v0 + v1, f0, acc[0]);
  acc[1] = fmaf(v2 + v3, f1, acc[1]);
}

// One round's words of a warp: rows g and g + 8 of its two tiles at its chunk.
struct QSlot {
  uint4 q[2];
  uint32_t s[2];
};

// The CTA's items in order: units [u, end) of its run, each unit's blocks of kQStage rows (up to 4
// passes of kQTokens, all from one staging and one dequantisation of the words).
struct QCursor {
  uint32_t u, blk, rd, nblk;
  int e, begin, end;
  uint32_t n, tile0;  // tile0: the warp's first tile at its round-0 chunk (the load cursor's)
  bool live;
};

struct QSpace {
  const int* list;
  const int32_t* offsets;
  uint32_t tiles, chunks, per_expert, rounds, end, block;  // block: rows an item (kQTokens or kQStage)
};

__device__ __forceinline__ void q_open(const QSpace& sp, bool gated, QCursor& c, int warp) {
  c.live = c.u < sp.end;
  if (!c.live) return;
  const uint32_t slot = c.u / sp.per_expert, l = c.u - slot * sp.per_expert;
  c.e = sp.list[slot];
  c.n = l * (gated ? 4u : 8u);
  const uint32_t w = uint32_t(warp & 3);
  c.tile0 = (uint32_t(c.e) * sp.tiles + c.n + 2u * (gated ? (w & 1u) : w)) * sp.chunks + uint32_t(warp >> 2);
  c.begin = sp.offsets[c.e];
  c.end = sp.offsets[c.e + 1];
  c.nblk = uint32_t(c.end - c.begin) / sp.block + ((uint32_t(c.end - c.begin) % sp.block) != 0u);
  c.blk = 0, c.rd = 0;
}

__device__ __forceinline__ void q_next(const QSpace& sp, bool gated, QCursor& c, int warp) {
  if (++c.rd < sp.rounds) return;
  c.rd = 0;
  if (++c.blk < c.nblk) return;
  ++c.u;
  q_open(sp, gated, c, warp);
}

// Warp w' = warp & 3 of warpgroup G: its two tiles' words at chunk G + 4 rd of the cursor's unit.
template <bool kGated>
__device__ __forceinline__ void q8_load(const Mxfp4Decode& a, const Mxfp4Decode& b, const QSpace& sp, const QCursor& c, int lane, int warp,
                                        QSlot& r) {
  const uint32_t w = uint32_t(warp & 3), ch = uint32_t(warp >> 2) + 4u * c.rd, g = uint32_t(lane) >> 2;
  if (!c.live || ch >= sp.chunks) {  // zero codes: a zero A for a chunk past the matrix
    r.q[0] = r.q[1] = make_uint4(0u, 0u, 0u, 0u), r.s[0] = r.s[1] = 0u;
    return;
  }
  const Mxfp4Decode& m = kGated && w >= 2 ? b : a;
  const uint32_t tile = c.tile0 + 4u * c.rd;
  const uint4* pq = reinterpret_cast<const uint4*>(m.packed) + (tile * 32u + lane);
  const uint32_t* ps = reinterpret_cast<const uint32_t*>(m.scales) + (tile * 8u + g);
  r.q[0] = load_stream(pq);
  r.s[0] = __ldg(ps);
  r.q[1] = load_stream(pq + sp.chunks * 32u);
  r.s[1] = __ldg(ps + sp.chunks * 8u);
}

// kMulti: items of up to kQStage rows whose passes share each round's A registers (many rows an
// expert); else items of one pass (kQTokens rows), straight-line (the common decode case).
template <bool kGated, bool kMulti>
__global__ void __launch_bounds__(Q::kThreads, 1) decode_gemm_q8(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                                                                  const float* __restrict__ x, float* __restrict__ y, MoeAct act) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_inv[kQStage], s_wmax[Q::kWarps];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)), xs_addr = (raw + kQAtom - 1) & ~(kQAtom - 1);
  uint8_t* xs = smem_raw + (xs_addr - raw);
  // After the 4 passes' atoms: the reduction's two buffers [warp][tile 2w' + j][token][row].
  constexpr int kBlock = kMulti ? kQStage : kQTokens, kPassesMax = kBlock / kQTokens;
  using Red = float[Q::kWarps][2][kBlock][8];
  // One-pass items: a static 8 KB pair (measured faster than the dynamic placement); kMulti's 32 KB
  // pair follows the atoms in dynamic shared memory.
  __shared__ __align__(16) float s_red_small[kMulti ? 1 : 2][Q::kWarps][2][kQTokens][8];
  Red* s_red = kMulti ? reinterpret_cast<Red*>(xs + (kQStage / kQTokens) * size_t(a.cols / 128) * kQAtom) : reinterpret_cast<Red*>(s_red_small);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x >> 5), 0);
  if constexpr (kGated) pdl_bulk::pdl_trigger();
  list_touched_experts(offsets, experts, s_list, &s_count);
  __syncthreads();
  const uint32_t tiles = static_cast<uint32_t>(a.rows / 8), chunks = static_cast<uint32_t>(a.cols / 128);
  const uint32_t per_expert = kGated ? tiles / 4 : tiles / 8, all = uint32_t(s_count) * per_expert, per = (all + gridDim.x - 1) / gridDim.x;
  const uint32_t u0 = blockIdx.x * per;
  const QSpace sp{s_list, offsets, tiles, chunks, per_expert, (chunks + 3) / 4, min(all, u0 + per), uint32_t(kBlock)};
  const uint32_t xs_desc = (xs_addr >> 4) | (1u << 16), cols = chunks * 128u;
  QCursor ld{u0, 0, 0, 0, 0, 0, 0, 0, 0, false}, cp = ld;
  q_open(sp, kGated, ld, warp);
  q_open(sp, kGated, cp, warp);
  QSlot ring[kQRing];
#pragma unroll
  for (int j = 0; j < kQRing; ++j) {
    q8_load<kGated>(a, b, sp, ld, lane, warp, ring[j]);
    if (ld.live) q_next(sp, kGated, ld, warp);
  }
  if constexpr (!kGated) pdl_bulk::pdl_wait();  // the first rounds' loads are out: now the activations may be read
  int staged_e = -1, staged_r0 = -1, buf = 0;
  float acc[kPassesMax][2];
  while (cp.live) {
#pragma unroll
    for (int j = 0; j < kQRing; ++j) {
      if (!cp.live) break;
      const int r0 = cp.begin + int(cp.blk) * kBlock, nrows = min(kBlock, cp.end - r0);
      const int np = kMulti ? (nrows + kQTokens - 1) / kQTokens : 1;
      if (cp.rd == 0) {
        if (staged_e != cp.e || r0 < staged_r0 || r0 >= staged_r0 + kQStage) {  // uniform: up to 16 rows staged at once
          q_stage_rows(x, r0, min(kQStage, cp.end - r0), cols, chunks, xs, s_inv, s_wmax);
          staged_e = cp.e, staged_r0 = r0;
          __syncthreads();
        }
#pragma unroll
        for (int p = 0; p < kPassesMax; ++p) acc[p][0] = acc[p][1] = 0.0f;
      }
      const int first = r0 - staged_r0;  // the item's first row in the staged window (a multiple of 4)
      // This round: chunk G + 4 rd, 4 groups, each a fresh m64n8k32 into d[i & 1].
      const QSlot& r = ring[j];
      float f0[4], f1[4];
      q_multipliers(r.s[0], f0);
      q_multipliers(r.s[1], f1);
      // A chunk past the matrix (chunks % 4 != 0) has zero A: B reads the last chunk's atom, inside the staged rows.
      const uint32_t ch = min(uint32_t(warp >> 2) + 4u * cp.rd, chunks - 1);
      const uint32_t dlo = xs_desc + (uint32_t(first / kQTokens) * chunks + ch) * (kQAtom >> 4), dhi = 1u << 30;
      // All 4 groups' A first; then per pass one fence, 4 wgmma in one commit group, one wait, the sums
      // (the A registers serve every pass).
      uint32_t fr[4][4];
      float d[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t w0 = word_of(r.q[0], i), w1 = word_of(r.q[1], i);
        fr[i][0] = fp8_lo(w0);
        fr[i][1] = fp8_lo(w1);
        fr[i][2] = fp8_hi(w0);
        fr[i][3] = fp8_hi(w1);
      }
      if (!kMulti || np == 1) {  // one pass, straight-line
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < 4; ++i) qgmma8(d[i], fr[i], q_desc(dlo + 2u * i, dhi));
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 4; ++i) q8_take(d[i], f0[i], f1[i], acc[0]);
      } else {
#pragma unroll
      for (int p = 0; p < kPassesMax; ++p) {
        if (p >= np) break;  // uniform
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < 4; ++i) qgmma8(d[i], fr[i], q_desc(dlo + uint32_t(p) * chunks * (kQAtom >> 4) + 2u * i, dhi));
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 4; ++i) q8_take(d[i], f0[i], f1[i], acc[p]);
      }
      }
      // The slot is free: the round kQRing on.
      q8_load<kGated>(a, b, sp, ld, lane, warp, ring[j]);
      if (ld.live) q_next(sp, kGated, ld, warp);
      if (cp.rd + 1 == sp.rounds) {  // the item's last round: reduce over the 4 warpgroups
        Red& red = s_red[buf];
        buf ^= 1;
#pragma unroll
        for (int p = 0; p < kPassesMax; ++p) {
          if (p >= np) break;
          red[warp][0][kQTokens * p + t][g] = acc[p][0];  // row g of tile 2w', token 4p + t
          red[warp][1][kQTokens * p + t][g] = acc[p][1];  // row g of tile 2w' + 1
        }
        __syncthreads();
        constexpr int kOut = (kGated ? 4 : 8) * kBlock * 8;  // (output tile, token, row) of the item
        for (int idx = threadIdx.x; idx < kOut; idx += Q::kThreads) {
          const int k = idx / (kBlock * 8), tok = (idx / 8) % kBlock, rr = idx % 8;
          if (tok >= nrows) continue;
          float va = 0.0f, vb = 0.0f;
#pragma unroll
          for (int G = 0; G < 4; ++G) {
            va += red[4 * G + (k >> 1)][k & 1][tok][rr];
            if constexpr (kGated) vb += red[4 * G + 2 + (k >> 1)][k & 1][tok][rr];
          }
          const float inv = s_inv[first + tok];
          y[int64_t(r0 + tok) * a.rows + int64_t(cp.n + k) * 8 + rr] = kGated ? act(va * inv, vb * inv) : va * inv;
        }
      }
      q_next(sp, kGated, cp, warp);
    }
  }
}

}  // namespace

Status launch_decode_qgmma_wide(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity, const float* x,
                                float* act, float* out, const MoeAct& fn, cudaStream_t stream) {
  if (w.w1.rows % 32 != 0 || w.w2.rows % 64 != 0)
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmmaWide takes inter % 32 == 0 and dim % 64 == 0");
  if (w.w1.wide_scales || w.w3.wide_scales || w.w2.wide_scales)
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmmaWide takes scale bytes <= 128 only (no wide_scales)");
  auto run = [&](auto gate, auto down, int block) -> Status {
    constexpr size_t kPasses = kQStage / kQTokens;
    const size_t red = block == kQStage ? 2 * sizeof(float) * Q::kWarps * 2 * size_t(block) * 8 : 0;  // kMulti's, dynamic
    const size_t smem_g = kPasses * size_t(w.w1.cols / 128) * kQAtom + kQAtom + red;  // atoms, their alignment, reduction
    const size_t smem_d = kPasses * size_t(w.w2.cols / 128) * kQAtom + kQAtom + red;
    PDS_ASSIGN_OR_RETURN(unsigned grid_g, grid_for(gate, smem_g, experts * (w.w1.rows / 32), Q::kThreads));
    PDS_ASSIGN_OR_RETURN(unsigned grid_d, grid_for(down, smem_d, experts * (w.w2.rows / 64), Q::kThreads));
    gate<<<grid_g, Q::kThreads, smem_g, stream>>>(w.w1, w.w3, offsets, static_cast<int>(experts), x, act, fn);
    PDS_RETURN_IF_ERROR(last_launch_status("moe decode gate/up (qgmma wide)"));
    PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, down, dim3(grid_d), dim3(Q::kThreads), smem_d, stream, w.w2, w.w2, offsets,
                                                         static_cast<int>(experts), static_cast<const float*>(act), out, fn),
                                    "moe decode down launch (qgmma wide)"));
    return last_launch_status("moe decode down (qgmma wide)");
  };
  if (capacity >= kMoeDecodeQgmmaMultiMinCapacity) return run(decode_gemm_q8<true, true>, decode_gemm_q8<false, true>, kQStage);
  return run(decode_gemm_q8<true, false>, decode_gemm_q8<false, false>, kQTokens);
}

}  // namespace pdserve::cuda::moe_decode_detail
