// The warpgroup forms' unit split (moe_decode_wgmma_sm90.cu: kWeightsAPdlWgmma*, bf16 HGMMA;
// moe_decode_qgmma_sm90.cu: kWeightsAPdlQgmma, E4M3 QGMMA): the CTA's warpgroups, the chunk pairs
// each takes a round, a warp's words of one unit and their loads. Internal to kernels/moe.
#pragma once

#include <cstdint>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_wa.cuh"

namespace pdserve::cuda::moe_decode_detail {

// kGroups warpgroups a CTA (4: kWeightsAPdlWgmma, 16 warps; 3: kWeightsAPdlWgmma3, 12 warps at
// up to 168 registers), each 2 chunks a round: 4 x 2 x 4 rounds = 32 chunks (cols <= 4096),
// 3 x 2 x 5 rounds = 30 (cols <= 3840; K3's 3584 and 3072).
template <int kGroups>
struct Wg {
  static constexpr int kThreads = kGroups * 128;
  static constexpr int kWarps = kGroups * 4;
  static constexpr int kRounds = kGroups == 4 ? 4 : 5;
  static constexpr uint32_t kMaxChunks = 2u * kGroups * kRounds;
  // k16 steps a wgmma commit group (fence, commit and wait once a group): 2 where the registers
  // allow (3 warpgroups), else 1.
  static constexpr int kStepsPerCommit = kGroups == 4 ? 1 : 2;
};

// A warp's words of one unit: round r's chunk, tiles 2p and 2p + 1 of its operand.
template <int kRounds>
struct WgRegs {
  uint4 q[kRounds][2];
  uint32_t s[kRounds][2];
};

// Warp `warp`'s chunk in round 0 (its chunk in round r is 2 kGroups r more).
__device__ __forceinline__ uint32_t wg_chunk0(int warp) { return 2u * uint32_t(warp >> 2) + uint32_t((warp >> 1) & 1); }

template <bool kGated, int kGroups>
__device__ __forceinline__ void wg_load(const Mxfp4Decode& a, const Mxfp4Decode& b, const WaSpace& sp, uint32_t u, int lane, int warp,
                                        WgRegs<Wg<kGroups>::kRounds>& r) {
  constexpr int kRounds = Wg<kGroups>::kRounds;
  constexpr uint32_t kStep = 2u * kGroups;
  int e;
  uint32_t n;
  wa_unit<kGated>(sp, u, &e, &n);
  const uint32_t p = warp & 1, c0 = wg_chunk0(warp), g = lane >> 2;
  // The fields, not a reference to one of the two by-value kernel arguments (that put both on the
  // stack: a local load a unit).
  const uint8_t* packed = kGated && p ? b.packed : a.packed;
  const uint8_t* scales = kGated && p ? b.scales : a.scales;
  const uint32_t tile = (uint32_t(e) * sp.tiles + n + (kGated ? 0u : 2u * p)) * sp.chunks + c0;
  // One pointer a tile (j = 0, 1) at the warp's round-0 chunk; round rd is a constant kStep rd
  // tiles on (an immediate offset: the address math is per unit, not per load).
  const uint4* pq[2];
  const uint32_t* ps[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    pq[j] = reinterpret_cast<const uint4*>(packed) + ((tile + j * sp.chunks) * 32u + lane);
    ps[j] = reinterpret_cast<const uint32_t*>(scales) + ((tile + j * sp.chunks) * 8u + g);
  }
#pragma unroll
  for (int rd = 0; rd < kRounds; ++rd) {
    if (c0 + kStep * rd < sp.chunks) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        r.q[rd][j] = load_stream(pq[j] + kStep * rd * 32u);
        r.s[rd][j] = __ldg(ps[j] + kStep * rd * 8u);
      }
    } else {  // no chunk: zero codes give a zero A (c_b of an odd chunk count), no select a step
#pragma unroll
      for (int j = 0; j < 2; ++j) r.q[rd][j] = make_uint4(0u, 0u, 0u, 0u), r.s[rd][j] = 0u;
    }
  }
}

// The warpgroup forms' unit output from the warps' sums s_red [warp][tile 2p + j][token][row]
// (after a barrier): output tile k of the unit (gated: gate and up tile k, in warps 2w and 2w + 1;
// down: operand k / 2's tile k % 2, in warps 2w + k / 2) summed over the warps in order, times
// scale(token), to y rows r0.. (nrows of them; rows_out = y's row width). One (tile, token, row) a
// thread.
template <bool kGated, int kWarps, int kTokens, typename Act, typename Scale>
__device__ __forceinline__ void wg_write_unit(const float (*s_red)[2][kTokens][8], int nrows, int r0, int64_t rows_out, uint32_t n,
                                              float* __restrict__ y, const Act& act, Scale&& scale) {
  const int k = threadIdx.x / (kTokens * 8), tok = (threadIdx.x / 8) % kTokens, rr = threadIdx.x % 8;
  if (k >= (kGated ? 2 : 4) || tok >= nrows) return;
  float va = 0.0f, vb = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps / 2; ++w) {
    if constexpr (kGated) {
      va += s_red[2 * w][k][tok][rr];
      vb += s_red[2 * w + 1][k][tok][rr];
    } else {
      va += s_red[2 * w + (k >> 1)][k & 1][tok][rr];
    }
  }
  const float sc = scale(tok);
  y[int64_t(r0 + tok) * rows_out + int64_t(n + k) * 8 + rr] = kGated ? act(va * sc, vb * sc) : va * sc;
}

// The warpgroup forms' kernel body around their unit step: gate/up (kGated) triggers the down
// launch at once and, on its last unit, pulls the first two units of the down CTA of its index
// into L2; down (a programmatic dependent launch) loads its first two units, then waits
// (griddepcontrol.wait) before the first compute reads the activations, and waits even with no
// work. Units are blocked over the CTAs, their words double-buffered in registers (ping_pong);
// compute(v, regs) runs unit v. s_list / s_count: the caller's shared memory.
template <bool kGated, int kGroups, typename Compute>
__device__ __forceinline__ void wg_run_units(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* __restrict__ offsets, int experts,
                                             const Mxfp4Decode& next, uint32_t next_grid, int* s_list, int* s_count, Compute&& compute) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (kGated) pdl_bulk::pdl_trigger();
  list_touched_experts(offsets, experts, s_list, s_count);
  __syncthreads();
  const uint32_t tiles = static_cast<uint32_t>(a.rows / 8);
  const WaSpace sp{s_list, tiles, static_cast<uint32_t>(a.cols / 128), kGated ? tiles / 2 : tiles / 4};
  const uint32_t all = uint32_t(*s_count) * sp.per_expert, per = (all + gridDim.x - 1) / gridDim.x;
  const uint32_t u = blockIdx.x * per, units = min(all, u + per);
  if (kGated && u >= units) wa_prefetch_next_start<kL2First>(next, s_list, *s_count, next_grid, threadIdx.x);  // idle CTA
  bool waited = false;
  using Regs = WgRegs<Wg<kGroups>::kRounds>;
  ping_pong<Regs>(
      u, units, 1u, [&](uint32_t v, Regs& r) { wg_load<kGated, kGroups>(a, b, sp, v, lane, warp, r); },
      [&](uint32_t v, const Regs& r) {
        if (!kGated && !waited) pdl_bulk::pdl_wait(), waited = true;  // both units' loads are out: now x may be read
        compute(sp, v, r);
      },
      [&](uint32_t v) {
        if (kGated && v + 1 >= units) wa_prefetch_next_start<kL2First>(next, s_list, *s_count, next_grid, threadIdx.x);
      });
  if (!kGated && !waited) pdl_bulk::pdl_wait();  // no work: still complete only after gate/up
}

}  // namespace pdserve::cuda::moe_decode_detail
