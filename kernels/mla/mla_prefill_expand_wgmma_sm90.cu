// Step 2 of the MLA prefill (mla_prefill.h) on Hopper warpgroup MMA (MlaPrefillExpand::kWgmma):
// C[t][n] = lat[t] . kv_b[n] for the whole context, n over heads x (nope 128 + v 128), bf16 in,
// fp32 accumulate, bf16 out scattered into K's nope part and V.
//
// Tile = 128 context tokens x one head's 256 columns (so the epilogue's split is fixed: columns
// 0-127 go to K, 128-255 to V). Two warpgroups of 64 tokens, each issuing wgmma m64n128k16 twice
// per k step (A and B from shared memory, both K-major). The latent dim streams through a
// 4-stage ring of 64-wide chunks (A 16 KB + B 32 KB a stage, 128-byte swizzled rows written by
// 16-byte cp.async from all 256 threads, rows past the context zero-filled), prefetched two
// chunks ahead, one wgmma group in flight. CTAs are persistent (one an SM) and walk tiles in
// steps of the grid; the ring runs across tile boundaries, so the next tile's first chunks load
// under this tile's last MMAs and its epilogue. Layout facts: wgmma_bf16.cuh.
#include <cuda_bf16.h>

#include <algorithm>

#include "common/cuda_check.h"
#include "mla/mla_prefill.h"
#include "mla/mla_prefill_wgmma.h"
#include "mla/mma_bf16.cuh"
#include "mla/wgmma_bf16.cuh"

namespace pdserve::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;                  // two warpgroups
constexpr int kTileT = 128;                    // context tokens a tile (64 a warpgroup)
constexpr int kHalf = 128;                     // nope = v = 128: each half is one m64n128 accumulator
constexpr int kTileN = 2 * kHalf;              // one head's columns
constexpr int kChunk = 64;                     // latent values a stage: one 128-byte swizzled row
constexpr int kStages = 4;
constexpr int kABytes = kTileT * 128;          // 16 KB
constexpr int kBBytes = kTileN * 128;          // 32 KB
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack for the 1024-byte swizzle alignment

// Rows [0, rows) of a [rows][64] bf16 chunk (row i at src + i * stride) into swizzled rows at dst;
// rows at or past `valid` zero-filled. Thread t copies 16-byte chunk t % 8 of rows t / 8 + 32 q:
// the swizzle (row & 7) is the same for every q, so one shared offset serves all copies.
template <int kRowsCopied>
__device__ __forceinline__ void load_rows(uint32_t dst, const bf16* src, int64_t stride, int valid, int tid) {
  const int c8 = tid % 8, rr = tid / 8;
  const uint32_t d0 = dst + rr * 128 + ((c8 ^ (rr & 7)) << 4);
#pragma unroll
  for (int q = 0; q < kRowsCopied / 32; ++q) {
    const bool ok = rr + 32 * q < valid;
    const bf16* row = src + (ok ? int64_t(rr + 32 * q) * stride : 0) + c8 * 8;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d0 + q * 32 * 128), "l"(row), "r"(ok ? 16 : 0));
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    expand_wgmma_kernel(const bf16* __restrict__ lat, const bf16* __restrict__ w, int ctx, int heads, int lat_dim, int qk,
                        bf16* __restrict__ kb, bf16* __restrict__ vb) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (mma::smem_addr(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, c4 = lane % 4;
  const int chunks = lat_dim / kChunk;
  const int tiles = (ctx + kTileT - 1) / kTileT * heads;
  const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = my_tiles * chunks;  // this CTA's chunks over all its tiles, in order

  // Chunk c: tile blockIdx.x + (c / chunks) * gridDim.x = (token block, head), latent chunk c % chunks.
  auto load = [&](int c) {
    const int tile = blockIdx.x + (c / chunks) * gridDim.x, k0 = (c % chunks) * kChunk;
    const int t0 = tile / heads * kTileT, h = tile % heads;
    const uint32_t s = base + (c % kStages) * kStageBytes;
    load_rows<kTileT>(s, lat + int64_t(t0) * lat_dim + k0, lat_dim, ctx - t0, tid);
    load_rows<kTileN>(s + kABytes, w + int64_t(h) * kTileN * lat_dim + k0, lat_dim, kTileN, tid);
  };

  float acc[2][64];
  if (total > 0) load(0);
  mma::cp_async_commit();
  if (total > 1) load(1);
  mma::cp_async_commit();
  for (int i = 0, c = 0; i < my_tiles; ++i) {
    for (int kc = 0; kc < chunks; ++kc, ++c) {
      // Chunk c landed (c + 1 may still fly) for this thread; the barrier makes it every thread's,
      // and tells every warpgroup that chunk c - 2's MMAs are done (each waited for them at the end
      // of step c - 1), so its slot may be refilled with chunk c + 2.
      mma::cp_async_wait<1>();
      wgmma::fence_proxy_async();
      __syncthreads();
      if (c + 2 < total) load(c + 2);
      mma::cp_async_commit();
      const uint32_t a_s = base + (c % kStages) * kStageBytes + wg * 64 * 128, b_s = base + (c % kStages) * kStageBytes + kABytes;
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < kChunk / 16; ++k) {
        const uint64_t da = wgmma::desc_sw128(a_s + k * 32, 16, 1024);
        const int accumulate = kc > 0 || k > 0;
        wgmma::m64n128k16_ss(acc[0], da, wgmma::desc_sw128(b_s + k * 32, 16, 1024), accumulate);
        wgmma::m64n128k16_ss(acc[1], da, wgmma::desc_sw128(b_s + kHalf * 128 + k * 32, 16, 1024), accumulate);
      }
      wgmma::commit();
      wgmma::wait<1>();  // chunk c - 1 done; chunk c stays in flight under the next step's copies
    }
    wgmma::wait<0>();
    wgmma::pin(acc[0]);
    wgmma::pin(acc[1]);
    // Epilogue: this warp's 16 tokens x 256 columns as bf16 pairs (the m64n128 accumulator layout:
    // d[4t + {0,1}] row g, columns 8t + 2 c4 + {0,1}; d[4t + {2,3}] row g + 8).
    const int tile = blockIdx.x + i * gridDim.x;
    const int h = tile % heads;
    const int r0 = tile / heads * kTileT + wg * 64 + warp * 16 + g;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = r0 + 8 * half;
      if (row >= ctx) continue;
      bf16* krow = kb + (row * heads + h) * qk;
      bf16* vrow = vb + (row * heads + h) * kHalf;
#pragma unroll
      for (int t = 0; t < kHalf / 8; ++t) {
        const int col = 8 * t + 2 * c4;
        *reinterpret_cast<uint32_t*>(krow + col) = mma::pack_bf16(acc[0][4 * t + 2 * half], acc[0][4 * t + 2 * half + 1]);
        *reinterpret_cast<uint32_t*>(vrow + col) = mma::pack_bf16(acc[1][4 * t + 2 * half], acc[1][4 * t + 2 * half + 1]);
      }
    }
  }
  mma::cp_async_wait<0>();
}

}  // namespace

bool mla_prefill_expand_wgmma_has_kernel(int64_t nope, int64_t v_dim, int64_t latent_dim) {
  return nope == kHalf && v_dim == kHalf && latent_dim > 0 && latent_dim % kChunk == 0;
}

Status mla_prefill_expand_wgmma(const void* lat, const void* w, int64_t ctx, int64_t heads, int64_t qk, int64_t latent_dim, void* kb,
                                void* vb, cudaStream_t stream, int max_ctas) {
  if (ctx <= 0) return Status::ok();
  const int64_t tiles = (ctx + kTileT - 1) / kTileT * heads;
  if (heads <= 0 || tiles > INT32_MAX || ctx * heads * qk > (int64_t(1) << 62))
    return invalid_argument("mla_prefill_expand_wgmma: context too long for one step");
  int device = 0, sms = 0;
  PDS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "mla prefill expand: device"));
  PDS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "mla prefill expand: SM count"));
  // Per call: the attribute belongs to the current device (TP ranks each own one); not a stream op.
  PDS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(expand_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
                                  "mla prefill expand: shared memory attribute"));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, max_ctas > 0 ? std::min(max_ctas, sms) : sms));
  expand_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(static_cast<const bf16*>(lat), static_cast<const bf16*>(w),
                                                              static_cast<int>(ctx), static_cast<int>(heads), static_cast<int>(latent_dim),
                                                              static_cast<int>(qk), static_cast<bf16*>(kb), static_cast<bf16*>(vb));
  return last_launch_status("mla_prefill_expand_wgmma");
}

}  // namespace pdserve::cuda
