// Pieces the decode-MoE kernels share (moe_decode_sm90.cu: streamed, staged, weights-on-A;
// moe_decode_fused_sm90.cu: one launch through a TMA ring): dequantisation of the decode
// layout (moe_decode.h), the MMA, the touched-expert list, token staging, the weights-on-A
// chunk step, and the host's cached occupancy query. Internal to kernels/moe.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "moe/moe_decode.h"
#include "moe/moe_activation.cuh"

namespace pdserve::cuda::moe_decode_detail {

constexpr int kMaxExperts = 1024;
constexpr int kStagedPad = 32;  // bf16 per staged row: rows 64 bytes apart mod 128, no bank conflicts
constexpr int kWaWarps = 16;    // weights-on-A kernels: MMA warps per CTA
constexpr int kWaTokens = 8;    // the MMA's N: tokens a pass
// kWeightsAPdlF32's token rows are staged as bf16(x) x 2^kF32TokenShift (see wa_chunk_f32).
constexpr int kF32TokenShift = 64;
constexpr float kF32TokenScale = 18446744073709551616.0f;  // 2^64

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// (lo, hi) -> bf16x2, round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(d) : "f"(lo), "f"(hi));
  return d;
}

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word_of(const uint4& q, int i) { return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w; }

// The four bf16x2 registers of one word (moe_decode.h's bit shuffle), scaled by E8M0 byte s.
// The unscaled part: the codes as bf16x2 times 2^-126.
// 9 bit operations a word: out0 a mask, out1 and out2 a shift or rotate and a mask, out3 two
// rotates and two masks (no 32-bit layout gives all four outputs by one move each).
__device__ __forceinline__ uint32_t rotl(uint32_t q, int n) { return __funnelshift_l(q, q, n); }
// Half h of dequant_bits: registers 2h, 2h + 1 (k-step h of the word's group; the wgmma
// kernel dequantises one k16 step at a time).
template <int h>
__device__ __forceinline__ void dequant_bits_half(uint32_t q, uint32_t (&b)[2]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  if constexpr (h == 0) {
    b[0] = q & kMask;
    b[1] = (q << 4) & kMask;
  } else {
    b[0] = rotl(q, 10) & kMask;
    b[1] = (rotl(q, 22) & 0x00400040u) | (rotl(q, 30) & 0x81808180u);
  }
}
__device__ __forceinline__ void dequant_bits(uint32_t q, uint32_t (&b)[4]) {
  uint32_t l[2], h[2];
  dequant_bits_half<0>(q, l);
  dequant_bits_half<1>(q, h);
  b[0] = l[0], b[1] = l[1], b[2] = h[0], b[3] = h[1];
}

// The wide path's second multiplier: 2^(s-127) in both halves (as e8m0_to_f32), applied after
// the lift by 2^126 (kWideLift) that makes the codes normal bf16.
constexpr uint32_t kWideLift = 0x7E807E80u;
__device__ __forceinline__ uint32_t wide_multiplier(uint32_t s) {
  const uint32_t one = s == 0 ? 0x0040u : s == 255 ? 0x7FC0u : (s << 7);
  return one * 0x10001u;
}

template <bool kWide>
__device__ __forceinline__ void dequant_word(uint32_t q, uint32_t s, uint32_t (&b)[4]) {
  dequant_bits(q, b);
  if constexpr (!kWide) {
    const uint32_t c = ((s + 126u) << 7) * 0x10001u;  // 2^(s-1) = 2^126 * 2^(s-127), s <= 128
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = bf16x2_mul(b[j], c);
  } else {
    const uint32_t c = wide_multiplier(s);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = bf16x2_mul(bf16x2_mul(b[j], kWideLift), c);
  }
}

// Warp 0 of the CTA lists the touched experts (offsets[e+1] > offsets[e]) ascending into
// list[0..*count); the caller syncs before reading them.
// begin (optional): the listed experts' first rows, then the last one's end (count + 1 entries),
// from the same loads (no second round trip to offsets).
__device__ __forceinline__ void list_touched_experts(const int32_t* __restrict__ offsets, int experts, int* list, int* count,
                                                     int* begin = nullptr) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const int end = begin != nullptr ? offsets[experts] : 0;  // in flight with the loop's loads
  int n = 0;
  for (int base = 0; base < experts; base += 32) {
    const int e = base + lane;
    const int b = e < experts ? offsets[e] : 0;
    const bool busy = e < experts && offsets[e + 1] > b;
    const unsigned m = __ballot_sync(0xffffffffu, busy);
    const int at = n + __popc(m & ((1u << lane) - 1u));
    if (busy) list[at] = e;
    if (busy && begin != nullptr) begin[at] = b;
    n += __popc(m);
  }
  if (lane == 0) *count = n;
  if (lane == 0 && begin != nullptr) begin[n] = end;
}

// Rows [r0, r0 + nrows) of x (fp32, `cols` wide) into x_s as bf16, `stride` apart; threads
// tid = 0..nthreads-1 share the work. kCoherent reads through L2 only (data another CTA
// of the same launch wrote), else the read-only path. kScaled: x 2^kF32TokenShift first.
template <bool kCoherent, bool kScaled = false>
__device__ __forceinline__ void stage_rows(const float* x, int64_t r0, uint32_t nrows, uint32_t cols, uint32_t stride, uint16_t* x_s,
                                           uint32_t tid, uint32_t nthreads) {
  const uint32_t c4n = cols / 4, n4 = nrows * c4n;
  const float4* xr = reinterpret_cast<const float4*>(x + r0 * cols);
#pragma unroll 4
  for (uint32_t idx = tid; idx < n4; idx += nthreads) {
    const uint32_t row = idx / c4n, c4 = idx - row * c4n;
    float4 v = kCoherent ? __ldcg(xr + idx) : __ldg(xr + idx);
    if constexpr (kScaled) {  // x 2^64 (kWeightsAPdlF32): exact
      v.x *= kF32TokenScale, v.y *= kF32TokenScale, v.z *= kF32TokenScale, v.w *= kF32TokenScale;
    }
    *reinterpret_cast<uint2*>(x_s + row * stride + 4 * c4) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  }
}

// The weights-on-A step of one 128-input chunk: q[k] / s[k] are the lane's packed word quad
// and scale word of tile k of a 4-tile unit (tiles 2p, 2p+1 form A operand p: lane (g, t)'s
// word of tile 2p gives a0/a2, of tile 2p+1 a1/a3), xg the lane's 8 staged bf16 inputs of
// token g at the chunk's start (inputs 32i + 8t.. for word i). acc[p] gets (row g of tile
// 2p, tokens 2t, 2t+1), (row g of tile 2p+1, the same tokens).
template <bool kWide>
__device__ __forceinline__ void wa_chunk(const uint4 (&q)[4], const uint32_t (&s)[4], const uint16_t* xg, bool tok_ok, float (&acc)[2][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (tok_ok) v = *reinterpret_cast<const uint4*>(xg + 32 * i);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t lo[4], hi[4];
      dequant_word<kWide>(word_of(q[2 * p], i), (s[2 * p] >> (8 * i)) & 0xffu, lo);
      dequant_word<kWide>(word_of(q[2 * p + 1], i), (s[2 * p + 1] >> (8 * i)) & 0xffu, hi);
      const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
      mma_bf16(acc[p], a0, v.x, v.y);
      mma_bf16(acc[p], a1, v.z, v.w);
    }
  }
}

// a * (c's low half in both halves), a * (c's high half in both): ptxas folds the broadcast
// into the multiply's operand (HMUL2 ... R.H0_H0), so it costs no instruction.
__device__ __forceinline__ uint32_t bf16x2_mul_low(uint32_t a, uint32_t c) {
  uint32_t d;
  asm("{\n .reg .b16 l, h;\n .reg .b32 b;\n mov.b32 {l, h}, %2;\n mov.b32 b, {l, l};\n mul.rn.bf16x2 %0, %1, b;\n}" : "=r"(d) : "r"(a), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t bf16x2_mul_high(uint32_t a, uint32_t c) {
  uint32_t d;
  asm("{\n .reg .b16 l, h;\n .reg .b32 b;\n mov.b32 {l, h}, %2;\n mov.b32 b, {h, h};\n mul.rn.bf16x2 %0, %1, b;\n}" : "=r"(d) : "r"(a), "r"(c));
  return d;
}

// The narrow-scale multipliers of a scale word (every byte <= 128): 2^(s-1) of bytes 0, 2 in
// the (low, high) halves of *ev, of bytes 1, 3 in *od. One add a word (+ 126 never carries into
// the next byte) and a shift + mask a register, where dequant_word spends about four
// instructions a word; byte i's multiplier is half i / 2 of (i even ? ev : od).
__device__ __forceinline__ void narrow_multipliers(uint32_t s, uint32_t* ev, uint32_t* od) {
  const uint32_t e = s + 0x7E7E7E7Eu;
  *ev = (e << 7) & 0x7F807F80u;
  *od = (e >> 1) & 0x7F807F80u;
}

// Word i's four bf16x2 registers, scaled by byte i of the scale word whose multipliers are
// (ev, od) (narrow_multipliers): 9 bit operations and 4 multiplies, the broadcast free.
template <int i>
__device__ __forceinline__ void dequant_narrow(uint32_t q, uint32_t ev, uint32_t od, uint32_t (&b)[4]) {
  dequant_bits(q, b);
  const uint32_t c = (i & 1) ? od : ev;
#pragma unroll
  for (int j = 0; j < 4; ++j) b[j] = i < 2 ? bf16x2_mul_low(b[j], c) : bf16x2_mul_high(b[j], c);
}

// wa_chunk for narrow scales (no byte above 128; kAuto's blocked and PDL forms since moedec11):
// the same MMAs on the same values, with (1) the multipliers from narrow_multipliers, (2) the
// token rows loaded unguarded (a row past the pass's end holds stale or never-written shared
// memory, but B's column g only reaches D's column g, token g, which the reduction never
// writes out), and (3) the two k-halves of a word pair accumulated into separate registers
// (accA, accB: four independent MMA chains a warp, summed by the caller).
__device__ __forceinline__ void wa_chunk_narrow(const uint4 (&q)[4], const uint32_t (&s)[4], const uint16_t* xg, float (&accA)[2][4],
                                                float (&accB)[2][4]) {
  uint32_t ev[4], od[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) narrow_multipliers(s[k], &ev[k], &od[k]);
  auto step = [&](auto ic) {
    constexpr int i = decltype(ic)::value;
    const uint4 v = *reinterpret_cast<const uint4*>(xg + 32 * i);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t lo[4], hi[4];
      dequant_narrow<i>(word_of(q[2 * p], i), ev[2 * p], od[2 * p], lo);
      dequant_narrow<i>(word_of(q[2 * p + 1], i), ev[2 * p + 1], od[2 * p + 1], hi);
      const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
      mma_bf16(accA[p], a0, v.x, v.y);
      mma_bf16(accB[p], a1, v.z, v.w);
    }
  };
  step(std::integral_constant<int, 0>{});
  step(std::integral_constant<int, 1>{});
  step(std::integral_constant<int, 2>{});
  step(std::integral_constant<int, 3>{});
}

// ---- kWeightsAPdlF32 (moedec11; kAuto's pick from 129 to 4095 pairs): the E8M0 scale applied to fp32 partial sums rather
// than to every bf16x2 register. The MMA takes the codes as dequant_bits leaves them, E2M1 x
// 2^-126 (bf16 subnormals for codes 0 and +-0.5: the tensor core must keep them), against
// token rows staged as bf16(x) x 2^kF32TokenShift (exact: a power of two); each (A operand,
// 32-input group) runs its two MMAs into a fresh accumulator d, and the operand's sums take
// d x 2^(s - 127 + 126 - kF32TokenShift) per row (4 FFMA a group pair), in place of 8 HMUL2.
// Products are w x 2^-62 (fp32 subnormal only below |w x| ~ 2^-64). Narrow scales only (bytes
// <= 128; any byte <= 193 would fit).

// fp32 2^(s + kBias - 127) for the four bytes of a scale word: + kBias a byte (no carry while a byte
// stays <= 255 - kBias), then the byte moved to the exponent field.
template <uint32_t kBias>
__device__ __forceinline__ void exponent_multipliers(uint32_t s, float (&f)[4]) {
  const uint32_t e = s + kBias * 0x01010101u;
  f[0] = __uint_as_float((e << 23) & 0x7F800000u);
  f[1] = __uint_as_float((e << 15) & 0x7F800000u);
  f[2] = __uint_as_float((e << 7) & 0x7F800000u);
  f[3] = __uint_as_float((e >> 1) & 0x7F800000u);
}
// fp32 2^(s - 65): + 62 a byte (no carry for bytes <= 193).
__device__ __forceinline__ void f32_multipliers(uint32_t s, float (&f)[4]) { exponent_multipliers<62>(s, f); }

// d = A B (the accumulator input zero).
__device__ __forceinline__ void mma_bf16_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const float z = 0.0f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(z));
}

// wa_chunk_narrow's step with the scale on the fp32 sums (token rows unguarded as there).
__device__ __forceinline__ void wa_chunk_f32(const uint4 (&q)[4], const uint32_t (&s)[4], const uint16_t* xg, float (&acc)[2][4]) {
  float f[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) f32_multipliers(s[k], f[k]);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = *reinterpret_cast<const uint4*>(xg + 32 * i);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t lo[4], hi[4];
      dequant_bits(word_of(q[2 * p], i), lo);
      dequant_bits(word_of(q[2 * p + 1], i), hi);
      const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
      float d[4];
      mma_bf16_zero(d, a0, v.x, v.y);
      mma_bf16(d, a1, v.z, v.w);
      acc[p][0] = fmaf(d[0], f[2 * p][i], acc[p][0]);  // row g: tile 2p
      acc[p][1] = fmaf(d[1], f[2 * p][i], acc[p][1]);
      acc[p][2] = fmaf(d[2], f[2 * p + 1][i], acc[p][2]);  // row g + 8: tile 2p + 1
      acc[p][3] = fmaf(d[3], f[2 * p + 1][i], acc[p][3]);
    }
  }
}

// acc[p] of wa_chunk -> red[k][token][row] for k = 2p, 2p+1 (this warp's part of the sums).
__device__ __forceinline__ void wa_store_partials(const float (&acc)[2][4], float (*red)[kWaTokens][8], int g, int t) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    red[2 * p][2 * t][g] = acc[p][0];
    red[2 * p][2 * t + 1][g] = acc[p][1];
    red[2 * p + 1][2 * t][g] = acc[p][2];
    red[2 * p + 1][2 * t + 1][g] = acc[p][3];
  }
}

// CTAs to launch: as many as fit on the GPU at once, at most max_units. Cached per kernel
// address and shared-memory size, so launches after the first make no attribute calls
// (stream capture stays clean); the first raises the kernel's dynamic shared-memory limit to
// all the SM allows, so that one size set first never caps another size of the same kernel.
template <typename Kernel>
Result<unsigned> grid_for(Kernel kernel, size_t smem, int64_t max_units, int threads) {
  // Per (kernel, shared memory, GPU): the attribute is the current device's (common/per_device.h),
  // and the TP ranks of one process call this from their own threads at once.
  struct Entry {
    const void* kernel;
    size_t smem;
    int dev, per_sm, sms;
  };
  static Entry cache[48];
  static int used = 0;
  static std::mutex mu;
  const void* key = reinterpret_cast<const void*>(kernel);
  int dev = 0;
  PDS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  int per_sm = 0, sms = 0;
  for (int i = 0; i < used; ++i)
    if (cache[i].kernel == key && cache[i].smem == smem && cache[i].dev == dev) per_sm = cache[i].per_sm, sms = cache[i].sms;
  if (per_sm == 0) {
    PDS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "sm count"));
    if (smem > 0) {  // allow all the dynamic shared memory the kernel's static part leaves (static + dynamic > 48 KB)
      cudaFuncAttributes fa{};
      int optin = 0;
      PDS_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&fa, kernel), "kernel attributes"));
      PDS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "shared memory opt-in"));
      const int most = optin - static_cast<int>(fa.sharedSizeBytes);
      if (static_cast<int64_t>(smem) > most) return invalid_argument("moe_expert_mlp_decode: kernel needs more shared memory than an SM has");
      PDS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most), "dynamic shared memory"));
    }
    PDS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), "occupancy"));
    if (per_sm == 0) return invalid_argument("moe_expert_mlp_decode: kernel does not fit on an SM");
    if (used < 48) cache[used++] = {key, smem, dev, per_sm, sms};
  }
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(max_units, int64_t(per_sm) * sms)));
}

// The fused kernel (moe_decode_fused_sm90.cu): gate/up, activation and down in one launch.
// Fits where its token rows and two ring slots fit in shared memory (K3: 3584 / 3072).
bool decode_fused_fits(int64_t dim, int64_t inter);
// `workspace`: moe_decode_workspace_bytes(experts) bytes, zero; left zero. `split`: the
// `form`: which fused kernel (kFused, kFusedSplit, kFusedSplitPdl, kFusedSplit24Warps*).
Status launch_decode_fused(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                           const MoeAct& fn, uint32_t* workspace, cudaStream_t stream, MoeDecodeKernel form);

// kWeightsAPdlWgmma (groups = 4) / kWeightsAPdlWgmma3 (3) (moe_decode_wgmma_sm90.cu): the two PDL
// launches with warpgroup MMA. Needs the kWeightsA shapes; 3 warpgroups also cols <= 3840.
Status launch_decode_wgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                           const MoeAct& fn, cudaStream_t stream, int groups);

// kWeightsAPdlRing* (moe_decode_ring_sm90.cu): the two PDL launches with a per-warp bulk-copy
// ring of weights; chunks_per_warp 2 (kWeightsAPdlRing*) or 1 (kWeightsAPdlRing1*); `pull`: the
// down CTAs' first units into L2 (the ...L2 forms). decode_ring_fits: the warp count fits.
bool decode_ring_fits(int64_t dim, int64_t inter, int chunks_per_warp);
// kWeightsAPdlQgmma (moe_decode_qgmma_sm90.cu): the two PDL launches on E4M3 warpgroup MMA, weights
// in the Mxfp4DecodeBits::kFp8 shuffle. Refuses dim, inter > 4096 and wide scales.
Status launch_decode_qgmma(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                           const MoeAct& fn, cudaStream_t stream);
// kWeightsAPdlQgmmaWide (moe_decode_qgmma_wide_sm90.cu): 64-row units. Refuses inter % 32, dim % 64, wide scales.
Status launch_decode_qgmma_wide(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, int64_t capacity, const float* x,
                                float* act, float* out, const MoeAct& fn, cudaStream_t stream);
Status launch_decode_ring(const MoeDecodeWeights& w, const int32_t* offsets, int64_t experts, const float* x, float* act, float* out,
                          const MoeAct& fn, cudaStream_t stream, int chunks_per_warp, bool pull);

}  // namespace pdserve::cuda::moe_decode_detail
