// moe_expert_mlp_decode (contract and weight layout: moe_decode.h). Per launch, CTAs
// stride over the units (touched expert, 8-row tile); the touched experts are listed from
// `offsets` by each CTA, so untouched experts cost nothing and nothing waits on the host.
// In a unit, the 8 warps split the 128-input chunks (warp w takes w, w+8, ...), issue all
// their weight loads at once (up to kBatch 16-byte loads per lane and matrix), then per
// word: dequantise in registers (a few bit ops and one bf16x2 multiply per two weights)
// and run two mma.m16n8k16 (tokens x 16 inputs x 8 rows, fp32 accumulators). The warps'
// partial sums meet in shared memory; the gated launch applies the activation there.
#include <algorithm>

#include "common/cuda_check.h"
#include "common/reduce.cuh"
#include "moe/moe_decode.h"

namespace pdserve::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTokens = 16;  // rows per pass: the MMA's M
constexpr int kBatch = 4;    // chunks per warp in flight: 8 warps x 4 x 128 = 4096 inputs
constexpr int kMaxExperts = 1024;

struct Act {
  MoeActivation kind;
  float beta, linear_beta;
  __device__ float operator()(float g, float u) const {
    if (kind == MoeActivation::kSiLU) return g * sigmoid(g) * u;
    const float a = beta * tanhf(g / beta) * sigmoid(g);
    return a * (linear_beta > 0.0f ? linear_beta * tanhf(u / linear_beta) : u);
  }
};

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

// The four B registers of one word (moe_decode.h's bit shuffle), scaled by E8M0 byte s.
template <bool kWide>
__device__ __forceinline__ void dequant_word(uint32_t q, uint32_t s, uint32_t (&b)[4]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  b[0] = q & kMask;
  b[1] = (q << 3) & kMask;
  b[2] = (q << 6) & kMask;
  b[3] = ((q >> 4) & 0x00C000C0u) | ((q >> 6) & 0x01000100u) | ((q << 2) & 0x80008000u);
  if constexpr (!kWide) {
    const uint32_t c = ((s + 126u) << 7) * 0x10001u;  // 2^(s-1) = 2^126 * 2^(s-127), s <= 128
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = bf16x2_mul(b[j], c);
  } else {
    const uint32_t lift = 0x7E807E80u;  // 2^126: the codes become normal bf16
    const uint32_t one = s == 0 ? 0x0040u : s == 255 ? 0x7FC0u : (s << 7);  // 2^(s-127), as e8m0_to_f32
    const uint32_t c = one * 0x10001u;
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = bf16x2_mul(bf16x2_mul(b[j], lift), c);
  }
}

// y[row, r] = act(x[row] . A[e, r], x[row] . B[e, r]) (gated) or x[row] . A[e, r], for
// every row of every touched expert. x: [*, cols] fp32; y: [*, a.rows] fp32.
template <bool kGated, bool kWide>
__global__ void __launch_bounds__(kThreads) decode_gemm(Mxfp4Decode a, Mxfp4Decode b, const int32_t* __restrict__ offsets, int experts,
                                                        const float* __restrict__ x, float* __restrict__ y, Act act) {
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_red[kWarps][kGated ? 2 : 1][kTokens][8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  if (warp == 0) {  // the touched experts, ascending
    int n = 0;
    for (int base = 0; base < experts; base += 32) {
      const int e = base + lane;
      const bool busy = e < experts && offsets[e + 1] > offsets[e];
      const unsigned m = __ballot_sync(0xffffffffu, busy);
      if (busy) s_list[n + __popc(m & ((1u << lane) - 1u))] = e;
      n += __popc(m);
    }
    if (lane == 0) s_count = n;
  }
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
constexpr int kStagedPad = 32;  // bf16 per row: rows 64 bytes apart mod 128, no bank conflicts

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
                                             const float* __restrict__ x, float* __restrict__ y, const Act& act, const UnitRegs<kMode>& r,
                                             uint16_t* x_s, float (*s_red)[2][kStagedRows][8]) {
  constexpr bool kTwo = kMode != kSingle;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  int e, n;
  unit_at<kMode>(sp, u, &e, &n);
  const int begin = offsets[e], end = offsets[e + 1];
  const int64_t cols = a.cols, stride = cols + kStagedPad, c4n = cols / 4;
  for (int r0 = begin; r0 < end; r0 += kStagedRows) {
    const int nrows = min(kStagedRows, end - r0);
    const int64_t n4 = nrows * c4n;
#pragma unroll 4
    for (int64_t idx = threadIdx.x; idx < n4; idx += kThreads) {
      const int64_t row = idx / c4n, c4 = idx - row * c4n;
      const float4 v = __ldg(reinterpret_cast<const float4*>(x + (r0 + row) * cols) + c4);
      *reinterpret_cast<uint2*>(x_s + row * stride + 4 * c4) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
    }
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
                                                                  int experts, const float* __restrict__ x, float* __restrict__ y, Act act) {
  extern __shared__ __align__(16) uint16_t x_s[];
  __shared__ int s_list[kMaxExperts];
  __shared__ int s_count;
  __shared__ float s_red[kWarps][2][kStagedRows][8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp == 0) {
    int n = 0;
    for (int base = 0; base < experts; base += 32) {
      const int e = base + lane;
      const bool busy = e < experts && offsets[e + 1] > offsets[e];
      const unsigned m = __ballot_sync(0xffffffffu, busy);
      if (busy) s_list[n + __popc(m & ((1u << lane) - 1u))] = e;
      n += __popc(m);
    }
    if (lane == 0) s_count = n;
  }
  __syncthreads();
  const int tiles = static_cast<int>(a.rows / 8);
  const UnitSpace sp{s_list, tiles, static_cast<int>(a.cols / 128), kMode == kPair ? tiles / 2 : tiles};
  const int64_t units = int64_t(s_count) * sp.per_expert, step = gridDim.x;
  UnitRegs<kMode> ra, rb;
  int64_t u = blockIdx.x;
  if (u < units) load_unit<kMode>(a, b, sp, u, lane, warp, ra);
  while (u < units) {
    if (u + step < units) load_unit<kMode>(a, b, sp, u + step, lane, warp, rb);
    compute_unit<kMode, kWide>(a, sp, u, offsets, x, y, act, ra, x_s, s_red);
    u += step;
    if (u >= units) break;
    if (u + step < units) load_unit<kMode>(a, b, sp, u + step, lane, warp, ra);
    compute_unit<kMode, kWide>(a, sp, u, offsets, x, y, act, rb, x_s, s_red);
    u += step;
  }
}

Status check(const Mxfp4Decode& m, int64_t rows, int64_t cols, const char* what) {
  if (!m.packed || !m.scales || m.rows != rows || m.cols != cols || !decode_layout_fits(rows, cols))
    return invalid_argument(std::string("moe_expert_mlp_decode: bad shape for ") + what + " (rows % 8, cols % 128)");
  if (rows / 8 > INT32_MAX / 4 || cols / 128 > INT32_MAX / 4) return invalid_argument("moe_expert_mlp_decode: matrix too large");
  return Status::ok();
}

// CTAs to launch: as many as fit on the GPU at once (each strides over the units), at
// most one per unit of the largest possible work. Per kernel and shared-memory size.
// Cached per kernel (template instantiation) and shared-memory size, so that launches
// after the first make no attribute calls (stream capture stays clean).
template <typename Kernel>
Result<unsigned> grid_for(Kernel kernel, size_t smem, int64_t max_units) {
  static size_t cached_smem = ~size_t(0);
  static int per_sm = 0, sms = 0;
  if (cached_smem != smem) {
    int dev = 0;
    PDS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "sm count"));
    if (smem > 48 * 1024)
      PDS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                                      "dynamic shared memory"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem), "occupancy"));
    per_sm = std::max(per_sm, 1);
    cached_smem = smem;
  }
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(max_units, int64_t(per_sm) * sms)));
}

template <bool kGated, bool kWide>
Status launch(const Mxfp4Decode& a, const Mxfp4Decode& b, const int32_t* offsets, int64_t experts, const float* x, float* y, Act act,
              bool staged, cudaStream_t stream, const char* what) {
  const int64_t tiles = a.rows / 8;
  if (staged) {
    const size_t smem = size_t(kStagedRows) * (a.cols + kStagedPad) * sizeof(uint16_t);
    const int ex = static_cast<int>(experts);
    if constexpr (kGated) {
      PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(decode_gemm_staged<kGatedPair, kWide>, smem, experts * tiles));
      decode_gemm_staged<kGatedPair, kWide><<<grid, kThreads, smem, stream>>>(a, b, offsets, ex, x, y, act);
    } else {  // down: rows = dim, a multiple of 128, so its tiles pair up
      PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(decode_gemm_staged<kPair, kWide>, smem, experts * tiles / 2));
      decode_gemm_staged<kPair, kWide><<<grid, kThreads, smem, stream>>>(a, a, offsets, ex, x, y, act);
    }
  } else {
    PDS_ASSIGN_OR_RETURN(unsigned grid, grid_for(decode_gemm<kGated, kWide>, 0, experts * tiles));
    decode_gemm<kGated, kWide><<<grid, kThreads, 0, stream>>>(a, b, offsets, static_cast<int>(experts), x, y, act);
  }
  return last_launch_status(what);
}

}  // namespace

Status moe_expert_mlp_decode(const MoeDecodeWeights& w, const int32_t* offsets, int64_t local_experts, int64_t capacity,
                             const float* x_sorted, float* act, float* out_sorted, cudaStream_t stream, MoeDecodeKernel kernel) {
  const int64_t inter = w.w1.rows, dim = w.w1.cols;
  PDS_RETURN_IF_ERROR(check(w.w1, inter, dim, "w1"));
  PDS_RETURN_IF_ERROR(check(w.w3, inter, dim, "w3"));
  PDS_RETURN_IF_ERROR(check(w.w2, dim, inter, "w2"));
  if (local_experts <= 0 || local_experts > kMaxExperts) return invalid_argument("moe_expert_mlp_decode: local_experts must be 1..1024");
  if (capacity == 0) return Status::ok();
  const int64_t max_cols = int64_t(kWarps) * kBatch * 128;
  const bool fits = dim <= max_cols && inter <= max_cols;
  if (kernel == MoeDecodeKernel::kStaged && !fits) return invalid_argument("moe_expert_mlp_decode: the staged kernel takes cols <= 4096");
  // kAuto: staged up to 1024 pairs (B <= 64 at top-16), where the H200 measured it 1-5%
  // ahead; beyond, experts get more than 8 rows and its 8-row passes redo the dequantisation
  // (B = 256: 635 us staged vs 408 us streamed; docs/perf.md).
  const bool staged = kernel == MoeDecodeKernel::kStaged || (kernel == MoeDecodeKernel::kAuto && fits && capacity <= 1024);
  const Act a{w.activation, w.situ_beta, w.situ_linear_beta};
  if (w.w1.wide_scales || w.w3.wide_scales)
    PDS_RETURN_IF_ERROR((launch<true, true>(w.w1, w.w3, offsets, local_experts, x_sorted, act, a, staged, stream, "moe decode gate/up")));
  else
    PDS_RETURN_IF_ERROR((launch<true, false>(w.w1, w.w3, offsets, local_experts, x_sorted, act, a, staged, stream, "moe decode gate/up")));
  if (w.w2.wide_scales)
    return launch<false, true>(w.w2, w.w2, offsets, local_experts, act, out_sorted, a, staged, stream, "moe decode down");
  return launch<false, false>(w.w2, w.w2, offsets, local_experts, act, out_sorted, a, staged, stream, "moe decode down");
}

}  // namespace pdserve::cuda
