// Pieces both prefill grouped-GEMM main loops share (moe_prefill_sm90.cu: mma.sync;
// moe_prefill_wgmma_sm90.cu: warpgroup MMA): cp.async, the half-word dequantisation, the SFU
// activation, the tile list and the dynamic tile queue. Internal to kernels/moe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moe/moe_decode_device.cuh"

namespace pdserve::cuda::moe_prefill_detail {

using namespace moe_decode_detail;

// The dynamic tile queue: the first two words of the caller's MoeDecodeWorkspace. `next`
// hands out tiles past the first gridDim.x; the last CTA to finish (`done`) zeroes both, so
// the next launch in stream order (down after gate/up, the next call, a graph replay)
// starts from zero.
struct TileQueue {
  unsigned next, done;
};

struct Tile {
  int e, ot, tok0, ntok;
};

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Half of dequant_word (moe_decode_device.cuh): the two bf16x2 registers of k-step `half`
// (0: out0, out1; 1: out2, out3), so only one k-step's A operands are live at a time.
// Lane (g, t)'s word holds row g's inputs 8t .. 8t + 7 of a 32-input group: half h gives
// inputs 8t + 4h + {0, 1} (o[0]) and 8t + 4h + {2, 3} (o[1]).
template <bool kWide>
__device__ __forceinline__ void dequant_half(uint32_t q, uint32_t s, int half, uint32_t (&o)[2]) {
  constexpr uint32_t kMask = 0x81C081C0u;
  if (half == 0) {
    o[0] = q & kMask;
    o[1] = (q << 4) & kMask;
  } else {
    o[0] = __funnelshift_l(q, q, 10) & kMask;
    o[1] = (__funnelshift_l(q, q, 22) & 0x00400040u) | (__funnelshift_l(q, q, 30) & 0x81808180u);
  }
  if constexpr (!kWide) {
    const uint32_t c = ((s + 126u) << 7) * 0x10001u;
    o[0] = bf16x2_mul(o[0], c), o[1] = bf16x2_mul(o[1], c);
  } else {
    const uint32_t lift = 0x7E807E80u;
    const uint32_t c = (s == 0 ? 0x0040u : s == 255 ? 0x7FC0u : (s << 7)) * 0x10001u;
    o[0] = bf16x2_mul(bf16x2_mul(o[0], lift), c), o[1] = bf16x2_mul(bf16x2_mul(o[1], lift), c);
  }
}

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// MoeAct (moe_activation.cuh) on the special-function unit: tanh.approx (relative error
// 2^-11), the sigmoid as 0.5 + 0.5 tanh(g / 2) (one special-function op, not an exp and an IEEE
// reciprocal: absolute error <= 2^-12); the result is rounded to bf16 (2^-9) right after.
__device__ __forceinline__ float act_fast(const MoeAct& fn, float g, float u) {
  const float sig = fmaf(0.5f, tanh_approx(0.5f * g), 0.5f);
  if (fn.kind == MoeActivation::kSiLU) return g * sig * u;
  const float a = fn.beta * tanh_approx(g * (1.0f / fn.beta)) * sig;
  return a * (fn.linear_beta > 0.0f ? fn.linear_beta * tanh_approx(u * (1.0f / fn.linear_beta)) : u);
}

// Token tiles of an expert of `rows` rows: tiles of `step` rows in order, except that a last
// tile of at most `absorb` rows joins the one before it (which then holds up to step + absorb).
__device__ __forceinline__ int token_tiles(int rows, int step, int absorb) {
  const int m = (rows + step - 1) / step;
  return m > 1 && rows - (m - 1) * step <= absorb ? m - 1 : m;
}

// Warp 0: tile_start[e] = tiles of the experts below e, token_tiles(rows_e, tok_tile, absorb) x
// out_tiles each (inclusive warp scans, 32 experts a step). The caller syncs before reading it.
__device__ __forceinline__ void scan_tile_starts(const int32_t* __restrict__ offsets, int experts, int tok_tile, int out_tiles,
                                                 int* tile_start, int absorb = 0) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  int run = 0;
  if (lane == 0) tile_start[0] = 0;
  for (int base = 0; base < experts; base += 32) {
    const int e = base + lane;
    int n = e < experts ? token_tiles(offsets[e + 1] - offsets[e], tok_tile, absorb) * out_tiles : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, n, o);
      if (lane >= o) n += v;
    }
    if (e < experts) tile_start[e + 1] = run + n;
    run += __shfl_sync(0xffffffffu, n, 31);
  }
}

// The last expert whose first tile is <= tile (never an empty one).
__device__ __forceinline__ int expert_of_tile(const int* tile_start, int experts, int tile) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_start[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Thread 0 of each CTA, after its last tile: counts the CTA out; the last one zeroes the queue.
__device__ __forceinline__ void finish_tile_queue(TileQueue* queue) {
  __threadfence();  // this CTA's last fetch is done before it counts itself out
  if (atomicAdd(&queue->done, 1u) == gridDim.x - 1) {
    atomicExch(&queue->next, 0u);
    atomicExch(&queue->done, 0u);
  }
}

}  // namespace pdserve::cuda::moe_prefill_detail
