// kWeightsAPdlQgmma (contract: moe_decode.h; weights repacked with Mxfp4DecodeBits::kFp8):
// kWeightsAPdlWgmma's schedule (blocked units of 4 decode-layout tiles, 4 warpgroups a CTA, warp
// w' = 0..3 of a warpgroup on operand p = w' & 1 and chunk c_a + (w' >> 1) of the round's pair,
// the down launch a programmatic dependent one, the down CTAs' first units pulled into L2) with the
// MMA on E4M3 warpgroup MMA (wgmma.m64n16k32.f32.e4m3.e4m3, SASS QGMMA).
//
// Why E4M3: every E2M1 value is an E4M3 value (times 2^-6, the subnormal 0.5 included), so a word
// of 8 codes becomes the two A registers of one k32 step in 5 bit operations (moe_decode.h's kFp8
// shuffle), where bf16 needs 9 for the same 8 weights and two HMMA (k16 each); the tensor cores
// read E4M3 natively on sm_90a (mma.sync E4M3 is emulated there: F2FP + HMMA).
//
// Per round a warp holds its chunk's two words a group (rows g and g + 8 of its operand: tiles 2p,
// 2p + 1); group i (inputs 32i..32i+31 of the chunk) is one QGMMA whose k slots 4t..4t+3 are the
// lane's inputs 8t..8t+3 and slots 16+4t.. its inputs 8t+4..8t+7 (the staged tokens use the same
// order). The accumulator is fresh a group (the scale differs by group and row): after the group's
// wgmma completes, acc += (hi + lo columns) x 2^(s - 121) by fp32 multiply-add (2^-6 of the codes
// and the E8M0 bias folded in), kWeightsAPdlF32's way. Two accumulator and A buffers, one commit
// group a QGMMA, waited one behind, so the next group's bits are ready while one runs.
// B: a pass of up to 4 tokens staged as E4M3 in the 128-byte-swizzle K-major layout: chunk c is
// atom c (1024 bytes: 8 rows x 128 inputs), row 2h = token h's hi = e4m3(x 2^k_h), row 2h + 1 its
// lo = e4m3(x 2^k_h - hi), with 2^k_h the power of two that puts the token's largest |x| in
// [128, 256) (E4M3's range ends at 448); the output takes 2^-k_h. The second 8-column block (the
// pair's c_b) sits one atom on (SBO 1024; 0 where c_b does not exist, when warps 2, 3 load zeros).
// Each warp keeps its accumulator block (d[0..3] or d[4..7]) by selects (a branch around the
// wgmma would split the warpgroup: every warp must issue the same wgmma instructions).
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_wa.cuh"
#include "moe/moe_decode_qgmma.cuh"
#include "moe/moe_decode_wg.cuh"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_decode_detail {

namespace {

using moe_prefill_detail::wgmma_commit;
using moe_prefill_detail::wgmma_fence;
using moe_prefill_detail::wgmma_wait;

// d = A B, the accumulator not read (scale-d 0): written only, so ptxas does not wait on d's
// earlier readers beyond the fence.
__device__ __forceinline__ void qgmma(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, 0, 1, 1;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
      : "memory");
}

// The warp's block (hs: d[0..3] or d[4..7]) of a completed accumulator into its sums: (row g,
// token t) and (row g + 8, token t), hi + lo columns, times the group's multipliers. The empty asm
// orders the reads after the wait (the wgmma's outputs are asynchronous). A select, not a branch:
// every warp of the warpgroup must issue the same wgmma instructions (.sync.aligned).
__device__ __forceinline__ void q_take(float (&d)[8], bool hs, float f0, float f1, float (&acc)[2]) {
  float v0 = hs ? d[4] : d[0], v1 = hs ? d[5] : d[1], v2 = hs ? d[6] : d[2], v3 = hs ? d[7] : d[3];
  asm volatile("" : "+f"(v0), "+f"(v1), "+f"(v2), "+f"(v3)::"memory");
  acc[0] = fmaf(v0 + v1, f0, acc[0]);
  acc[1] = fmaf(v2 + v3, f1, acc[1]);
}

// One round of a warp: its chunk's 4 groups (words q0 = row g, q1 = row g + 8; scale words s0,
// s1), the B descriptor's words (the pair's atom c_a, SBO to c_b's).
__device__ __forceinline__ void q_round(const uint4& q0, const uint4& q1, uint32_t s0, uint32_t s1, uint32_t dlo, uint32_t dhi, bool hs,
                                        float (&acc)[2]) {
  float f0[4], f1[4];
  q_multipliers(s0, f0);
  q_multipliers(s1, f1);
  uint32_t fr[2][4];
  float d[2][8];
  auto issue = [&](auto ic) {
    constexpr int i = decltype(ic)::value;
    const uint32_t w0 = word_of(q0, i), w1 = word_of(q1, i);
    fr[i & 1][0] = fp8_lo(w0);  // row g, slots 4t..4t+3
    fr[i & 1][1] = fp8_lo(w1);  // row g + 8
    fr[i & 1][2] = fp8_hi(w0);  // row g, slots 16+4t..
    fr[i & 1][3] = fp8_hi(w1);
    wgmma_fence();
    qgmma(d[i & 1], fr[i & 1], q_desc(dlo + 2u * i, dhi));
    wgmma_commit();
  };
  issue(std::integral_constant<int, 0>{});
  issue(std::integral_constant<int, 1>{});
  wgmma_wait<1>();
  q_take(d[0], hs, f0[0], f1[0], acc);
  issue(std::integral_constant<int, 2>{});
  wgmma_wait<1>();
  q_take(d[1], hs, f0[1], f1[1], acc);
  issue(std::integral_constant<int, 3>{});
  wgmma_wait<1>();
  q_take(d[0], hs, f0[2], f1[2], acc);
  wgmma_wait<0>();
  q_take(d[1], hs, f0[3], f1[3], acc);
}

template <bool kGated>
__device__ __forceinline__ void q_compute(const Mxfp4Decode& a, const WaSpace& sp, uint32_t u, const int32_t* __restrict__ offsets,
                                          const float* __restrict__ x, float* __restrict__ y, const MoeAct& act,
                                          const WgRegs<Q::kRounds>& r, uint8_t* xs, uint32_t xs_addr,
                                          float (*s_red2)[Q::kWarps][2][kQTokens][8], float* s_inv, float* s_wmax, int& staged_e,
                                          int& staged_r0, int& buf) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // The warp index from lane 0: ptxas then knows it is warp-uniform and keeps the descriptors in
  // uniform registers.
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x >> 5), 0);
  const uint32_t G = uint32_t(warp >> 2), hs = uint32_t((warp >> 1) & 1);
  // The B descriptor's low word at xs (shared addresses are < 2^18: no mask); a round adds its atom.
  const uint32_t xs_desc = (xs_addr >> 4) | (1u << 16);
  int e;
  uint32_t n;
  wa_unit<kGated>(sp, u, &e, &n);
  const int begin = offsets[e], end = offsets[e + 1];
  const uint32_t cols = static_cast<uint32_t>(a.cols);
  for (int r0 = begin; r0 < end; r0 += kQTokens) {
    const int nrows = min(kQTokens, end - r0);
    if (staged_e != e || r0 < staged_r0 || r0 >= staged_r0 + kQStage) {  // uniform
      q_stage_rows(x, r0, min(kQStage, end - r0), cols, sp.chunks, xs, s_inv, s_wmax);
      staged_e = e, staged_r0 = r0;
      __syncthreads();
    }
    const uint32_t pass = uint32_t(r0 - staged_r0) / kQTokens;  // its atoms: pass x chunks from xs
    float (*s_red)[2][kQTokens][8] = s_red2[buf];
    buf ^= 1;
    float acc[2] = {0.0f, 0.0f};
#pragma unroll
    for (int rd = 0; rd < Q::kRounds; ++rd) {
      const uint32_t ca = 2u * kGroups * rd + 2u * G;
      if (ca >= sp.chunks) break;  // uniform in the warpgroup
      const uint32_t dlo = xs_desc + (pass * sp.chunks + ca) * (kQAtom >> 4);
      const uint32_t dhi = (ca + 1 < sp.chunks ? kQAtom >> 4 : 0u) | (1u << 30);
      q_round(r.q[rd][0], r.q[rd][1], r.s[rd][0], r.s[rd][1], dlo, dhi, hs != 0, acc);
    }
    s_red[warp][0][t][g] = acc[0];  // row g of tile 2p, token t
    s_red[warp][1][t][g] = acc[1];  // row g of tile 2p + 1
    __syncthreads();
    const float* inv = s_inv + (r0 - staged_r0);  // the tokens' power-of-two scales, undone
    wg_write_unit<kGated, Q::kWarps, kQTokens>(s_red, nrows, r0, a.rows, n, y, act, [&](int tok) { return inv[tok]; });
  }
}

// Gate/up (kGated) or down (a programmatic dependent launch); the unit loop, PDL order and L2 pull
// are wg_run_units' (moe_decode_wg.cuh).
template <bool kGated>
__global__ void __launch_bounds__(Q::kThreads, 1) decode_gemm_q(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                                                                 const float* __restrict__ x, float* __restrict__ y, MoeAct act, Mxfp4Decode next,
                                                                 uint32_t next_grid) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_red[2][Q::kWarps][2][kQTokens][8];
  __shared__ float s_inv[kQStage], s_wmax[Q::kWarps];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)), xs_addr = (raw + kQAtom - 1) & ~(kQAtom - 1);
  uint8_t* xs = smem_raw + (xs_addr - raw);
  int staged_e = -1, staged_r0 = -1, buf = 0;
  wg_run_units<kGated, kGroups>(a, b, offsets, experts, next, next_grid, s_list, &s_count, [&](const WaSpace& sp, uint32_t v, const WgRegs<Q::kRounds>& r) {
    q_compute<kGated>(a, sp, v, offsets, x, y, act, r, xs, xs_addr, s_red, s_inv, s_wmax, staged_e, staged_r0, buf);
  });
}

}  // namespace

Status launch_decode_qgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                           const MoeAct& fn, cudaStream_t stream) {
  if (w.w1.cols / 128 > Q::kMaxChunks || w.w2.cols / 128 > Q::kMaxChunks)
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmma takes dim, inter <= 4096");
  if (w.w1.wide_scales || w.w3.wide_scales || w.w2.wide_scales)
    return invalid_argument("moe_expert_mlp_decode: kWeightsAPdlQgmma takes scale bytes <= 128 only (no wide_scales)");
  const auto gate = decode_gemm_q<true>;
  const auto down = decode_gemm_q<false>;
  constexpr size_t kPasses = kQStage / kQTokens;
  const size_t smem_g = kPasses * size_t(w.w1.cols / 128) * kQAtom + kQAtom;  // + the atoms' alignment
  const size_t smem_d = kPasses * size_t(w.w2.cols / 128) * kQAtom + kQAtom;
  PDS_ASSIGN_OR_RETURN(unsigned grid_g, grid_for(gate, smem_g, experts * (w.w1.rows / 16), Q::kThreads));
  PDS_ASSIGN_OR_RETURN(unsigned grid_d, grid_for(down, smem_d, experts * (w.w2.rows / 32), Q::kThreads));
  gate<<<grid_g, Q::kThreads, smem_g, stream>>>(w.w1, w.w3, offsets, static_cast<int>(experts), x, act, fn, w.w2, grid_d);
  PDS_RETURN_IF_ERROR(last_launch_status("moe decode gate/up (qgmma)"));
  PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, down, dim3(grid_d), dim3(Q::kThreads), smem_d, stream, w.w2, w.w2, offsets,
                                                       static_cast<int>(experts), static_cast<const float*>(act), out, fn, w.w2, 0u),
                                  "moe decode down launch (qgmma)"));
  return last_launch_status("moe decode down (qgmma)");
}

}  // namespace pdserve::cuda::moe_decode_detail
