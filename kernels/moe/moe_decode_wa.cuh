// The weights-on-A kernels' unit schedule, shared by moe_decode_sm90.cu (the mma.sync forms)
// and moe_decode_wgmma_sm90.cu (kWeightsAPdlWgmma): the register double buffer, the unit space
// (touched expert, row group) and its division, the L2 prefetches of a unit and of the down
// launch's first units. Internal to kernels/moe.
#pragma once

#include <cstdint>

#include "common/pdl_bulk.cuh"
#include "moe/moe_decode.h"

namespace pdserve::cuda::moe_decode_detail {

// The register double buffer of the staged and weights-on-A kernels: unit u + step's
// weights load into one register set while unit u computes from the other. before(u)
// runs first each step (the L2 prefetch hook); settle(u, regs) once, after the first load and
// before the second is issued (kWeightsAPdl*Stagger: wait for the first unit's words).
template <typename Regs, typename Unit, typename Load, typename Compute, typename Before, typename Settle>
__device__ __forceinline__ void ping_pong(Unit u, Unit units, Unit step, Load&& load, Compute&& compute, Before&& before, Settle&& settle) {
  Regs ra, rb;
  if (u < units) load(u, ra), settle(u, ra);
  while (u < units) {
    before(u);
    if (u + step < units) load(u + step, rb);
    compute(u, ra);
    u += step;
    if (u >= units) break;
    before(u);
    if (u + step < units) load(u + step, ra);
    compute(u, rb);
    u += step;
  }
}

template <typename Regs, typename Unit, typename Load, typename Compute, typename Before>
__device__ __forceinline__ void ping_pong(Unit u, Unit units, Unit step, Load&& load, Compute&& compute, Before&& before) {
  ping_pong<Regs>(u, units, step, load, compute, before, [](Unit, const Regs&) {});
}


struct WaSpace {
  const int* list;
  uint32_t tiles, chunks, per_expert;
  // floor((2^32 - 1) / per_expert): unit u's expert slot is __umulhi(u, inv) or one more
  // (one correction step), where a division by a value known only at run time costs about
  // 15 instructions (twice a unit: wa_load and wa_compute).
  uint32_t inv = 0xFFFFFFFFu / per_expert;
};

// (u / per_expert, u % per_expert) for u < 2^31 (unit indices are 32-bit: shape_fits).
__device__ __forceinline__ void wa_divmod(const WaSpace& sp, uint32_t u, uint32_t* q, uint32_t* r) {
  uint32_t qq = __umulhi(u, sp.inv), rr = u - qq * sp.per_expert;
  if (rr >= sp.per_expert) ++qq, rr -= sp.per_expert;
  *q = qq, *r = rr;
}

// kSplit > 1 (kWeightsAPdlSplitK): per_expert counts K slices; unit u is slice *h of the
// 16-row pair (gated) or 32-row group (down) u / kSplit of its expert.
template <bool kGated, int kSplit = 1>
__device__ __forceinline__ void wa_unit(const WaSpace& sp, uint32_t u, int* e, uint32_t* n, uint32_t* h = nullptr) {
  uint32_t slot, l;
  wa_divmod(sp, u, &slot, &l);
  *e = sp.list[slot];
  *n = (l / kSplit) * (kGated ? 2u : 4u);
  if (h) *h = l % kSplit;
}

// The chunk range [*cb, *ce) of K slice h: ceil(chunks / kSplit) chunks a slice.
template <int kSplit>
__device__ __forceinline__ void wa_slice(uint32_t chunks, uint32_t h, uint32_t* cb, uint32_t* ce) {
  const uint32_t per = (chunks + kSplit - 1) / kSplit;
  *cb = h * per;
  *ce = min(chunks, *cb + per);
}


// Lane i < 4 of the caller prefetches run i of unit u into L2: gated, packed and scales of
// a then b (tiles n, n+1 each); down, packed and scales of tiles n..n+3.
template <bool kGated>
__device__ __forceinline__ void wa_prefetch(const Mxfp4Decode& a, const Mxfp4Decode& b, const WaSpace& sp, uint32_t u, int i) {
  int e;
  uint32_t n;
  wa_unit<kGated>(sp, u, &e, &n);
  const uint32_t tile0 = (uint32_t(e) * sp.tiles + n) * sp.chunks, ntiles = (kGated ? 2u : 4u) * sp.chunks;
  if (!kGated && i >= 2) return;
  const Mxfp4Decode& m = kGated && i >= 2 ? b : a;
  const bool scales = i & 1;
  const uint8_t* p = scales ? m.scales + size_t(tile0) * 32u : m.packed + size_t(tile0) * 512u;
  const uint32_t bytes = ntiles * (scales ? 32u : 512u);
  pdl_bulk::bulk_prefetch_l2(p, bytes);
}


// kL2 = kL2First: units 0 and 1 of down CTA blockIdx.x; kL2All: all its units where the touched
// experts' down weights take at most kL2AllBytes, else the first two. Thread i < 2 x units
// issues unit i / 2's packed (i even) or scale bytes.
enum WaL2 { kL2None = 0, kL2First = 1, kL2All = 2 };
constexpr uint64_t kL2AllBytes = 24ull << 20;  // under half the H200's 50 MB L2

template <int kL2>
__device__ __forceinline__ void wa_prefetch_next_start(const Mxfp4Decode& next, const int* list, int count, uint32_t next_grid, int i) {
  if (blockIdx.x >= next_grid) return;
  const uint32_t tiles = static_cast<uint32_t>(next.rows / 8);
  const WaSpace sp{list, tiles, static_cast<uint32_t>(next.cols / 128), tiles / 4};
  const uint32_t all = uint32_t(count) * sp.per_expert, per = (all + next_grid - 1) / next_grid;
  const uint64_t bytes = uint64_t(count) * uint64_t(next.rows) * uint64_t(next.cols) * 17u / 32u;  // packed + scales
  const uint32_t n = kL2 == kL2All && bytes <= kL2AllBytes ? per : min(per, 2u);
  const uint32_t v = blockIdx.x * per + uint32_t(i >> 1);
  if (uint32_t(i >> 1) < n && v < all) wa_prefetch<false>(next, next, sp, v, i & 1);
}


}  // namespace pdserve::cuda::moe_decode_detail
