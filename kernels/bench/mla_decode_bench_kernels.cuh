// The diagnostic kernels of mla_decode_bench (bench only, never in the library): the copy ring
// without scoring (the "ring" table, ninth version), the launch floors (m13 / m14) and the
// read ceiling. Included once, by mla_decode_bench.cu.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "common/pdl_bulk.cuh"

namespace mla_decode_bench_kernels {

constexpr int64_t kLat = 512, kRope = 64, kEntry = kLat + kRope, kPage = 64;

// The copy ring alone (diagnostic, "ring" table): the run's plan, page tables, 16-token bulk
// tiles, 3 stages, one block barrier a tile, and NO scoring: what the access pattern and the
// ring give without any per-SM work. Writes one float per CTA so the copies are not idle.
// FILL: the prologue fills all three stages (kLeanBurst's first burst) instead of two.
template <bool FILL>
__global__ void __launch_bounds__(256, 2) copy_ring_kernel(const float* __restrict__ cache, const int32_t* __restrict__ table_all,
                                                           int64_t max_pages, const int32_t* __restrict__ plan, float* out) {
  using namespace pdserve::cuda::pdl_bulk;
  constexpr int kTile = 16, kStages = 3;
  extern __shared__ float4 smem_raw[];
  float* tiles = reinterpret_cast<float*>(smem_raw);
  __shared__ __align__(8) uint64_t full[kStages];
  const int item = blockIdx.x;
  if (item >= plan[0]) return;
  const int4 it = reinterpret_cast<const int4*>(plan + 4)[item];
  const int32_t* table = table_all + static_cast<int64_t>(it.x) * max_pages;
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) mbar_init(&full[st], 1);
    mbar_init_fence();
  }
  __syncthreads();
  const int begin = it.y, end = it.z, ntiles = (end - begin + kTile - 1) / kTile;
  auto issue = [&](int t0, int st) {
    if (threadIdx.x != 0) return;
    const int page = table[t0 / kPage];
    const unsigned bytes = page < 0 ? 0u : static_cast<unsigned>(min(kTile, end - t0) * kEntry * 4);
    if (bytes == 0) return mbar_arrive(&full[st]);
    mbar_arrive_expect_tx(&full[st], bytes);
    bulk_copy(tiles + st * kTile * kEntry, cache + (static_cast<int64_t>(page) * kPage + t0 % kPage) * kEntry, bytes, &full[st]);
  };
  constexpr int kAhead = FILL ? kStages : kStages - 1;
  for (int st = 0; st < kAhead && st < ntiles; ++st) issue(begin + st * kTile, st);
  float acc = 0.0f;
  for (int i = 0; i < ntiles; ++i) {
    mbar_wait(&full[i % kStages], (i / kStages) & 1);
    __syncthreads();
    if (i + kStages - 1 >= kAhead && i + kStages - 1 < ntiles) issue(begin + (i + kStages - 1) * kTile, (i + kStages - 1) % kStages);
    acc += tiles[(i % kStages) * kTile * kEntry + threadIdx.x];
  }
  if (threadIdx.x == 0) out[item] = acc;
}

// The launch floors (m13), each launched like the run (pdl, 256 threads, the run's shared
// memory) in graphs of back-to-back steps: an empty body (the wait and the trigger only); the
// same with a cluster barrier (the cluster form's shape); and one tile's cache bytes (16 tokens
// x 576 floats, 36,864 B) read from DRAM per CTA, summed and one value written: the launch and
// one DRAM round trip.
__global__ void __launch_bounds__(256) floor_empty_kernel() {
  pdserve::cuda::pdl_bulk::pdl_wait();
  pdserve::cuda::pdl_bulk::pdl_trigger();
}
__global__ void __launch_bounds__(256) floor_cluster_kernel() {
  pdserve::cuda::pdl_bulk::pdl_wait();
  pdserve::cuda::pdl_bulk::pdl_trigger();
  cooperative_groups::this_cluster().sync();
}
__global__ void __launch_bounds__(256) floor_read_kernel(const float* __restrict__ src, float* out) {
  pdserve::cuda::pdl_bulk::pdl_wait();
  constexpr int kVec = 16 * kEntry / 4 / 256;  // float4 a thread: 9
  const float4* p = reinterpret_cast<const float4*>(src + static_cast<int64_t>(blockIdx.x) * 16 * kEntry) + threadIdx.x;
  float4 v[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) v[k] = __ldcs(p + k * 256);
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc += v[k].x + v[k].y + v[k].z + v[k].w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ float s_sum[8];
  if (threadIdx.x % 32 == 0) s_sum[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += s_sum[k];
    out[blockIdx.x] = t;
  }
  pdserve::cuda::pdl_bulk::pdl_trigger();
}

// The read ceiling as a kernel sees it: a float4 grid-stride sum (read only).
__global__ void read_kernel(const float4* __restrict__ x, size_t n, float* out) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(x + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.0f) *out = acc;  // keeps the loads
}

}  // namespace mla_decode_bench_kernels
