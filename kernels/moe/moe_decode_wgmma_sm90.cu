// kWeightsAPdlWgmma (branch moedec13; contract: moe_decode.h): kWeightsAPdlL2's schedule (blocked
// units, the down launch a programmatic dependent one, the down CTAs' first units pulled into L2
// by gate/up's last units, the register double buffer, the reduction through shared memory)
// with the MMA step on warpgroup MMA (wgmma, SASS HGMMA) instead of mma.sync (HMMA).
//
// Plan. A unit is the same 4 decode-layout tiles (gated: gate n, n+1, up n, n+1; down n..n+3):
// two 16-row A operands p = 0, 1 (tiles 2p, 2p+1). The CTA's 16 warps are 4 warpgroups; in
// warpgroup G, warp w' = 0..3 takes operand p = w' & 1 and chunk slot h = w' >> 1, and in round r
// the warpgroup takes chunks c_a = 8r + 2G and c_b = c_a + 1 (4 rounds cover 32 chunks = 4096
// inputs; K3: gate/up 28 chunks, down 24). Per k16 step one wgmma.m64n16k16 (bf16, fp32
// accumulate, A from registers, B from shared memory): M rows 0-15 = warp 0 (operand 0 of c_a),
// 16-31 warp 1 (operand 1 of c_a), 32-47 warp 2 (operand 0 of c_b), 48-63 warp 3 (operand 1 of
// c_b); B's columns 0-7 = the 8 staged tokens over c_a's 16 inputs, 8-15 the same tokens over
// c_b's. Warps 0, 1 keep accumulator block 0 (d[0..3]), warps 2, 3 block 1 (d[4..7]); the cross
// terms are computed and dropped (tensor work is not the limit). A warp's A fragment is
// mma.m16n8k16's (lane (g, t) of the layout: {lo0, hi0, lo1, hi1} for the group's first k16 step,
// {lo2, hi2, lo3, hi3} for the second, the narrow scale applied by bf16x2 multiplies), so one
// accumulator runs over every k of the unit and the wgmma chain stays asynchronous: per k16 step,
// dequantise into one of two 4-register fragment buffers, fence, issue, commit, and wait until
// one step is pending (the buffer the next step overwrites is then free).
// B: the pass's 8 token rows, staged once per (expert, 8-row pass) as bf16 in the 128-byte-swizzle
// K-major layout (moe_prefill_wgmma.cuh): atom j (1024 bytes, 1024-aligned) = inputs 64j..64j+63
// of tokens 0-7, each 32-input group in wgmma_k_position order (moe_prefill_schedule.h). c_b's
// atoms sit 2 x 1024 bytes after c_a's, so columns 8-15 are reached by the descriptor's stride
// byte offset (SBO, bits 32-45, bytes >> 4: 2048 -> 128, any multiple of 1024 keeps every 8-row
// group on a swizzle atom). Where c_b does not exist (odd chunk counts) SBO = 0 and warps 2, 3
// feed zero A (zero codes loaded in its place). Registers: two unit sets of 4 chunks x 2 tiles x
// (16 + 4) bytes = 80 registers, 8 accumulators, 2 x 4 fragment registers: 512 threads at 128
// registers, no spills (narrow scales). kWeightsAPdlWgmma3: 3 warpgroups, 5 rounds (cols <= 3840),
// two k16 steps a commit group, 168 registers.
// Measured on the H200 (docs/perf.md, branch moedec13): correct, 0.75-0.87x kWeightsAPdlL2 / F32
// at B 1-192: the issue rate rose, but each HGMMA carries a warp's one 16 x 16 slice of A (one
// HMMA's work) plus the descriptor moves and the arrive / wait, 1.3-1.6x the instructions.
#include <cstdint>
#include <type_traits>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_wa.cuh"
#include "moe/moe_decode_wg.cuh"
#include "moe/moe_prefill_schedule.h"
#include "moe/moe_prefill_wgmma.cuh"

namespace pdserve::cuda::moe_decode_detail {

namespace {

using moe_prefill_detail::wgmma_commit;
using moe_prefill_detail::wgmma_fence;
using moe_prefill_detail::wgmma_k_position;
using moe_prefill_detail::wgmma_rs;
using moe_prefill_detail::wgmma_wait;

constexpr uint32_t kAtomBytes = 1024;  // 8 token rows x 64 inputs (bf16), one swizzle atom

// Rows [r0, r0 + nrows) of x (fp32, `cols` wide) into xs (1024-aligned) as bf16 in the swizzled
// K-major layout above: input c of token row lies in atom c / 64, that row's 128-byte line, at
// position 32 ((c / 32) % 2) + wgmma_k_position(c % 32), 16-byte piece swizzled by row ^ piece.
// A float4 (inputs 4m..4m+3) gives two bf16 pairs, 8 positions apart. Then the stores are made
// visible to the async proxy (wgmma); the caller syncs.
template <int kThreads>
__device__ __forceinline__ void wg_stage_rows(const float* x, int64_t r0, uint32_t nrows, uint32_t cols, uint8_t* xs, uint32_t tid) {
  const uint32_t c4n = cols / 4, n4 = nrows * c4n;
  const float4* xr = reinterpret_cast<const float4*>(x + r0 * cols);
#pragma unroll 4
  for (uint32_t idx = tid; idx < n4; idx += kThreads) {
    const uint32_t row = idx / c4n, c = 4 * (idx - row * c4n);
    const float4 v = __ldg(xr + idx);
    const uint32_t pos = uint32_t(wgmma_k_position(int(c & 31)));  // inputs c, c + 1; c + 2, c + 3 at pos + 8
    const uint32_t line = (c >> 6) * kAtomBytes + row * 128u;
    const uint32_t b0 = 64u * ((c >> 5) & 1u) + 2u * pos, b1 = b0 + 16u;
    const uint32_t sw = (row & 7u) << 4;
    *reinterpret_cast<uint32_t*>(xs + line + ((b0 & 0x70u) ^ sw) + (b0 & 15u)) = pack_bf16x2(v.x, v.y);
    *reinterpret_cast<uint32_t*>(xs + line + ((b1 & 0x70u) ^ sw) + (b1 & 15u)) = pack_bf16x2(v.z, v.w);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic stores -> wgmma's reads
}

// The B descriptor (K-major, 128-byte swizzle): start address >> 4 (bits 0-13), the leading byte
// offset 16 >> 4 (bits 16-29), the stride byte offset `sbo` >> 4 (bits 32-45: the second
// 8-column block; 0 reads the first block twice), swizzle mode 1 = 128 bytes (bits 62-63).
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(sbo >> 4) << 32) | (uint64_t(1) << 62);
}

// K16 step (group i, half h) of this warp's operand (tiles with words q0, q1 and scale words s0,
// s1; narrow multipliers ev*, od*): mma.m16n8k16's A fragment {row g, row g + 8} x {slots 2t,
// 2t + 1; 2t + 8, 2t + 9}.
template <bool kWide, int i, int h>
__device__ __forceinline__ void wg_frag(const uint4& q0, const uint4& q1, uint32_t s0, uint32_t s1, uint32_t ev0, uint32_t od0, uint32_t ev1,
                                        uint32_t od1, uint32_t (&f)[4]) {
  uint32_t lo[2], hi[2];
  dequant_bits_half<h>(word_of(q0, i), lo);
  dequant_bits_half<h>(word_of(q1, i), hi);
  if constexpr (kWide) {
    const uint32_t c0 = wide_multiplier((s0 >> (8 * i)) & 0xffu), c1 = wide_multiplier((s1 >> (8 * i)) & 0xffu);
#pragma unroll
    for (int j = 0; j < 2; ++j) lo[j] = bf16x2_mul(bf16x2_mul(lo[j], kWideLift), c0), hi[j] = bf16x2_mul(bf16x2_mul(hi[j], kWideLift), c1);
  } else {  // dequant_narrow's multiplies: byte i's multiplier is half i / 2 of (i odd ? od : ev)
    const uint32_t c0 = (i & 1) ? od0 : ev0, c1 = (i & 1) ? od1 : ev1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      lo[j] = i < 2 ? bf16x2_mul_low(lo[j], c0) : bf16x2_mul_high(lo[j], c0);
      hi[j] = i < 2 ? bf16x2_mul_low(hi[j], c1) : bf16x2_mul_high(hi[j], c1);
    }
  }
  f[0] = lo[0], f[1] = hi[0], f[2] = lo[1], f[3] = hi[1];
}

template <bool kGated, bool kWide, int kGroups>
__device__ __forceinline__ void wg_compute(const Mxfp4Decode& a, const WaSpace& sp, uint32_t u, const int32_t* __restrict__ offsets,
                                           const float* __restrict__ x, float* __restrict__ y, const MoeAct& act,
                                           const WgRegs<Wg<kGroups>::kRounds>& r, uint8_t* xs, uint32_t xs_addr,
                                           float (*s_red2)[Wg<kGroups>::kWarps][2][kWaTokens][8], int& staged_e, int& staged_r0, int& buf) {
  using C = Wg<kGroups>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // The warp index through a shuffle from lane 0: ptxas then knows it is warp-uniform and keeps the
  // descriptors in uniform registers (no R2UR a step).
  const int warp = int(threadIdx.x >> 5);
  const uint32_t G = uint32_t(warp >> 2), hs = uint32_t((warp >> 1) & 1);
  int e;
  uint32_t n;
  wa_unit<kGated>(sp, u, &e, &n);
  const int begin = offsets[e], end = offsets[e + 1];
  const uint32_t cols = static_cast<uint32_t>(a.cols);
  for (int r0 = begin; r0 < end; r0 += kWaTokens) {
    const int nrows = min(kWaTokens, end - r0);
    if (staged_e != e || staged_r0 != r0) {  // uniform; the last pass's barrier ended all reads of xs (wgmma waited)
      wg_stage_rows<C::kThreads>(x, r0, nrows, cols, xs, threadIdx.x);
      staged_e = e, staged_r0 = r0;
      __syncthreads();
    }
    float (*s_red)[2][kWaTokens][8] = s_red2[buf];
    buf ^= 1;
    float d[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    // k16 step s's fragment in fr[s % (2 kPer)]; kPer steps a commit group, one group pending after
    // each wait: a buffer is rewritten only after the group that read it is done.
    constexpr int kPer = C::kStepsPerCommit;
    uint32_t fr[2 * kPer][4];
#pragma unroll
    for (int rd = 0; rd < C::kRounds; ++rd) {
      const uint32_t ca = 2u * kGroups * rd + 2u * G;
      if (ca >= sp.chunks) break;  // uniform in the warpgroup
      const uint32_t sbo = ca + 1 < sp.chunks ? 2u * kAtomBytes : 0u;
      uint32_t ev0 = 0, od0 = 0, ev1 = 0, od1 = 0;
      if constexpr (!kWide) narrow_multipliers(r.s[rd][0], &ev0, &od0), narrow_multipliers(r.s[rd][1], &ev1, &od1);
      const uint32_t at = xs_addr + 2u * ca * kAtomBytes;
      auto frag = [&](auto ic) {  // k16 step s = 2i + h of the chunk (group i, half h) into its buffer
        constexpr int st = decltype(ic)::value, i = st >> 1, h = st & 1;
        wg_frag<kWide, i, h>(r.q[rd][0], r.q[rd][1], r.s[rd][0], r.s[rd][1], ev0, od0, ev1, od1, fr[st % (2 * kPer)]);
      };
      auto mma = [&](auto ic) {
        constexpr int st = decltype(ic)::value;
        constexpr uint32_t kOff = uint32_t(st >> 2) * kAtomBytes + 32u * uint32_t(st & 3);
        wgmma_rs<16>(d, fr[st % (2 * kPer)], wg_desc(at + kOff, sbo));
      };
      // One commit group: its kPer fragments, the fence (after every A write), its wgmmas.
      auto group = [&](auto qc) {
        constexpr int q = decltype(qc)::value;
        frag(std::integral_constant<int, q * kPer>{});
        if constexpr (kPer == 2) frag(std::integral_constant<int, q * kPer + 1>{});
        wgmma_fence();
        mma(std::integral_constant<int, q * kPer>{});
        if constexpr (kPer == 2) mma(std::integral_constant<int, q * kPer + 1>{});
        wgmma_commit();
        wgmma_wait<1>();  // the previous group is done: its buffers, the next group's, may be rewritten
      };
      group(std::integral_constant<int, 0>{});
      group(std::integral_constant<int, 1>{});
      group(std::integral_constant<int, 2>{});
      group(std::integral_constant<int, 3>{});
      if constexpr (kPer == 1) {
        group(std::integral_constant<int, 4>{});
        group(std::integral_constant<int, 5>{});
        group(std::integral_constant<int, 6>{});
        group(std::integral_constant<int, 7>{});
      }
    }
    wgmma_wait<0>();
    // This warp's block: (row g of tile 2p, tokens 2t, 2t + 1), (row g of tile 2p + 1, the same).
    const float v0 = hs ? d[4] : d[0], v1 = hs ? d[5] : d[1], v2 = hs ? d[6] : d[2], v3 = hs ? d[7] : d[3];
    s_red[warp][0][2 * t][g] = v0;
    s_red[warp][0][2 * t + 1][g] = v1;
    s_red[warp][1][2 * t][g] = v2;
    s_red[warp][1][2 * t + 1][g] = v3;
    __syncthreads();
    wg_write_unit<kGated, C::kWarps, kWaTokens>(s_red, nrows, r0, a.rows, n, y, act, [](int) { return 1.0f; });
  }
}

// Gate/up (kGated) or down (a programmatic dependent launch); the unit loop, PDL order and L2 pull
// are wg_run_units' (moe_decode_wg.cuh).
template <bool kGated, bool kWide, int kGroups>
__global__ void __launch_bounds__(Wg<kGroups>::kThreads, 1) decode_gemm_wg(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                                                                const float* __restrict__ x, float* __restrict__ y, MoeAct act, Mxfp4Decode next,
                                                                uint32_t next_grid) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  using C = Wg<kGroups>;
  __shared__ float s_red[2][C::kWarps][2][kWaTokens][8];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)), xs_addr = (raw + kAtomBytes - 1) & ~(kAtomBytes - 1);
  uint8_t* xs = smem_raw + (xs_addr - raw);
  int staged_e = -1, staged_r0 = -1, buf = 0;
  wg_run_units<kGated, kGroups>(a, b, offsets, experts, next, next_grid, s_list, &s_count, [&](const WaSpace& sp, uint32_t v, const WgRegs<C::kRounds>& r) {
    wg_compute<kGated, kWide, kGroups>(a, sp, v, offsets, x, y, act, r, xs, xs_addr, s_red, staged_e, staged_r0, buf);
  });
}

template <bool kWideGate, bool kWideDown, int kGroups>
Status launch_wg(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out, const MoeAct& fn,
                 cudaStream_t stream) {
  constexpr int kWgThreads = Wg<kGroups>::kThreads;
  if (w.w1.cols / 128 > Wg<kGroups>::kMaxChunks || w.w2.cols / 128 > Wg<kGroups>::kMaxChunks)
    return invalid_argument("moe_expert_mlp_decode: this wgmma form takes dim, inter <= 128 x 2 x warpgroups x rounds (3: 3840)");
  const auto gate = decode_gemm_wg<true, kWideGate, kGroups>;
  const auto down = decode_gemm_wg<false, kWideDown, kGroups>;
  const size_t smem_g = size_t(kWaTokens) * w.w1.cols * sizeof(uint16_t) + kAtomBytes;  // + the atoms' alignment
  const size_t smem_d = size_t(kWaTokens) * w.w2.cols * sizeof(uint16_t) + kAtomBytes;
  PDS_ASSIGN_OR_RETURN(unsigned grid_g, grid_for(gate, smem_g, experts * (w.w1.rows / 16), kWgThreads));
  PDS_ASSIGN_OR_RETURN(unsigned grid_d, grid_for(down, smem_d, experts * (w.w2.rows / 32), kWgThreads));
  gate<<<grid_g, kWgThreads, smem_g, stream>>>(w.w1, w.w3, offsets, static_cast<int>(experts), x, act, fn, w.w2, grid_d);
  PDS_RETURN_IF_ERROR(last_launch_status("moe decode gate/up (wgmma)"));
  PDS_RETURN_IF_ERROR(cuda_status(pdl_bulk::launch_pdl(true, down, dim3(grid_d), dim3(kWgThreads), smem_d, stream, w.w2, w.w2, offsets,
                                                       static_cast<int>(experts), static_cast<const float*>(act), out, fn, w.w2, 0u),
                                  "moe decode down launch (wgmma)"));
  return last_launch_status("moe decode down (wgmma)");
}

template <int kGroups>
Status launch_wg_any(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                     const MoeAct& fn, cudaStream_t stream) {
  const bool wg = w.w1.wide_scales || w.w3.wide_scales, wd = w.w2.wide_scales;
  if (wg)
    return wd ? launch_wg<true, true, kGroups>(w, offsets, experts, x, act, out, fn, stream)
              : launch_wg<true, false, kGroups>(w, offsets, experts, x, act, out, fn, stream);
  return wd ? launch_wg<false, true, kGroups>(w, offsets, experts, x, act, out, fn, stream)
            : launch_wg<false, false, kGroups>(w, offsets, experts, x, act, out, fn, stream);
}

}  // namespace

Status launch_decode_wgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                           const MoeAct& fn, cudaStream_t stream, int groups) {
  return groups == 3 ? launch_wg_any<3>(w, offsets, experts, x, act, out, fn, stream) : launch_wg_any<4>(w, offsets, experts, x, act, out, fn, stream);
}

}  // namespace pdserve::cuda::moe_decode_detail
