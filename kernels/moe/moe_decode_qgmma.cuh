// The E4M3 warpgroup-MMA decode forms' shared pieces (moe_decode_qgmma_sm90.cu: kWeightsAPdlQgmma,
// 32-row units and chunk pairs; moe_decode_qgmma_wide_sm90.cu: kWeightsAPdlQgmmaWide, 64-row units):
// the kFp8 word's two E4M3 registers, the scale multipliers, the B descriptor, and the staging of
// token rows as E4M3 hi / lo pairs. Internal to kernels/moe.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "common/reduce.cuh"
#include "moe/moe_decode_device.cuh"
#include "moe/moe_decode_wg.cuh"

namespace pdserve::cuda::moe_decode_detail {

constexpr int kGroups = 4;
using Q = Wg<kGroups>;
constexpr int kQTokens = 4;        // tokens a pass: hi and lo columns of each 8-column block
constexpr int kQStage = 16;        // tokens staged at once: 4 passes (an expert's rows up to 16 staged once)
constexpr uint32_t kQAtom = 1024;  // one chunk of the pass: 8 rows x 128 E4M3 inputs

// The two E4M3 registers of a word (moe_decode.h, Mxfp4DecodeBits::kFp8): inputs 0..3, 4..7.
__device__ __forceinline__ uint32_t fp8_lo(uint32_t q) { return q & 0x9C9C9C9Cu; }
__device__ __forceinline__ uint32_t fp8_hi(uint32_t q) { return (rotl(q, 6) & 0x88888888u) | (rotl(q, 4) & 0x14141414u); }

// fp32 2^(s - 121) for the four bytes of a scale word (+ 6 a byte, no carry for bytes <= 249):
// 2^(s - 127) of the E8M0 scale times the 2^6 the E4M3 codes lack.
__device__ __forceinline__ void q_multipliers(uint32_t s, float (&f)[4]) { exponent_multipliers<6>(s, f); }

// K-major, 128-byte swizzle (as moe_decode_wgmma_sm90.cu's wg_desc): low word = start >> 4 | LBO
// (16 >> 4) << 16, high word = SBO >> 4 | mode 1 << 30. Group i of a round starts 32 i bytes on:
// + 2 i in the low word (no carry: shared addresses < 2^18).
__device__ __forceinline__ uint64_t q_desc(uint32_t lo, uint32_t hi) { return uint64_t(lo) | (uint64_t(hi) << 32); }

// Two values as E4M3 hi / lo pairs (x.x in the low byte of each): hi = E4M3(x), lo = E4M3(x - hi), both
// round-to-nearest, saturating. Paired conversions (one cvt for two values each way; the E4M3 values
// are exact in f16 and f32, so the residual is the fp32 one a value at a time would give, bit for bit).
__device__ __forceinline__ void e4m3_hi_lo2(float2 v, uint32_t* hi, uint32_t* lo) {
  const __nv_fp8x2_storage_t h = __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
  const float2 back = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(h, __NV_E4M3)));
  const __nv_fp8x2_storage_t l = __nv_cvt_float2_to_fp8x2(make_float2(v.x - back.x, v.y - back.y), __NV_SATFINITE, __NV_E4M3);
  *hi = h, *lo = l;
}

// Byte offset of input c (a multiple of 4) of row `row` (0..7) of a pass's atoms: atom c / 128,
// the row's 128-byte line, k slot 32 (group) + (c % 8 < 4 ? 4t : 16 + 4t) for t = (c % 32) / 8,
// the 16-byte piece swizzled by row.
__device__ __forceinline__ uint32_t q_offset(uint32_t row, uint32_t c) {
  const uint32_t o = c & 31u, t = o >> 3;
  const uint32_t b = 32u * ((c >> 5) & 3u) + ((o & 4u) ? 16u + 4u * t : 4u * t);
  return (c >> 7) * kQAtom + row * 128u + ((((b >> 4) ^ row) & 7u) << 4) + (b & 15u);
}

// Rows [r0, r0 + nrows) (nrows <= kQStage) of x (fp32, `cols` wide) into xs as E4M3 hi / lo pairs:
// token h in pass h / 4 (its atoms `chunks` x 1024 bytes from pass h / 4's start), rows 2 (h % 4)
// and 2 (h % 4) + 1, scaled by its power of two; s_inv[h] = the inverse. Each token has T = 512 /
// (nrows rounded up to a power of two) threads: one pass of loads for its largest |x| (every load in
// flight at once), a barrier, then the same loads again (L1) for the conversion. Starts with a
// barrier (the last pass's reduction may still read s_inv); the caller syncs after. `stamp(code)` marks
// its phases for the traced build (-6 maxima loaded, -7 their barrier passed, -8 converted).
struct QNoStamp {
  __device__ __forceinline__ void operator()(int) const {}
};
template <class Stamp = QNoStamp>
__device__ __forceinline__ void q_stage_rows(const float* x, int64_t r0, uint32_t nrows, uint32_t cols, uint32_t chunks, uint8_t* xs,
                                             float* s_inv, float* s_wmax, Stamp stamp = {}) {
  __syncthreads();
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const uint32_t s2 = nrows <= 1 ? 1u : nrows <= 2 ? 2u : nrows <= 4 ? 4u : nrows <= 8 ? 8u : 16u;
  const uint32_t T = Q::kThreads / s2, h = threadIdx.x / T, sub = threadIdx.x % T, c4n = cols / 4;
  const bool live = h < nrows;
  const float4* xr = reinterpret_cast<const float4*>(x + (r0 + int64_t(h)) * cols);
  float m = 0.0f;
  if (live) {
#pragma unroll 8
    for (uint32_t i = sub; i < c4n; i += T) {
      const float4 v = __ldg(xr + i);
      m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
  }
  m = warp_max(m);
  stamp(-6);
  if (lane == 0) s_wmax[warp] = m;
  __syncthreads();
  stamp(-7);
  if (!live) return;
  float mt = 0.0f;
  for (uint32_t w = h * (T / 32); w < (h + 1) * (T / 32); ++w) mt = fmaxf(mt, s_wmax[w]);
  int k = 0;
  if (mt > 0.0f && mt <= 3.0e38f) {  // mt = f 2^e, f in [0.5, 1): mt 2^(8 - e) in [128, 256)
    int e;
    frexpf(mt, &e);
    k = min(126, max(-126, 8 - e));
  }
  const float sc = __uint_as_float(uint32_t(127 + k) << 23);
  if (sub == 0) s_inv[h] = __uint_as_float(uint32_t(127 - k) << 23);
  uint8_t* base = xs + (h / kQTokens) * chunks * kQAtom;
  const uint32_t row = 2u * (h % kQTokens);
  for (uint32_t i = sub; i < c4n; i += T) {
    const float4 v = __ldg(xr + i);
    uint32_t h01, l01, h23, l23;
    e4m3_hi_lo2(make_float2(v.x * sc, v.y * sc), &h01, &l01);
    e4m3_hi_lo2(make_float2(v.z * sc, v.w * sc), &h23, &l23);
    const uint32_t hi = h01 | (h23 << 16), lo = l01 | (l23 << 16);
    *reinterpret_cast<uint32_t*>(base + q_offset(row, 4 * i)) = hi;
    *reinterpret_cast<uint32_t*>(base + q_offset(row + 1, 4 * i)) = lo;
  }
  stamp(-8);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic stores -> wgmma's reads
}

}  // namespace pdserve::cuda::moe_decode_detail
