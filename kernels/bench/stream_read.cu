#include "bench/stream_read.h"

#include <algorithm>
#include <cstdint>

#include "common/pdl_bulk.cuh"

namespace pdserve::cuda::bench {

namespace {

constexpr int kStages = 3;
constexpr unsigned kStageBytes = 32 * 1024;

// One warp a CTA; lane 0 keeps the ring full and waits for each stage in turn.
__global__ void __launch_bounds__(32) stream_read_kernel(const unsigned char* src, size_t bytes, size_t share) {
  extern __shared__ float4 smem_raw[];
  unsigned char* const ring = reinterpret_cast<unsigned char*>(smem_raw);
  __shared__ __align__(8) uint64_t full[kStages];
  if (threadIdx.x != 0) return;
  const size_t begin = min(bytes, blockIdx.x * share), end = min(bytes, begin + share);
  const size_t chunks = (end - begin + kStageBytes - 1) / kStageBytes;
  for (int s = 0; s < kStages; ++s) pdl_bulk::mbar_init(&full[s], 1);
  pdl_bulk::mbar_init_fence();
  auto issue = [&](size_t c) {
    const int st = static_cast<int>(c % kStages);
    const size_t at = begin + c * kStageBytes;
    const unsigned n = static_cast<unsigned>(min(static_cast<size_t>(kStageBytes), end - at));
    pdl_bulk::mbar_arrive_expect_tx(&full[st], n);
    pdl_bulk::bulk_copy(ring + st * kStageBytes, src + at, n, &full[st]);
  };
  for (size_t c = 0; c < kStages && c < chunks; ++c) issue(c);
  for (size_t c = 0; c < chunks; ++c) {
    pdl_bulk::mbar_wait(&full[c % kStages], static_cast<unsigned>((c / kStages) & 1));
    if (c + kStages < chunks) issue(c + kStages);
  }
}

}  // namespace

cudaError_t launch_stream_read(const void* src, size_t bytes, cudaStream_t stream) {
  static int ctas = 0;  // two an SM of the current device (the bench drives one)
  constexpr int kSmem = kStages * kStageBytes;
  if (ctas == 0) {
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(stream_read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (e != cudaSuccess) return e;
    ctas = 2 * sms;
  }
  const size_t share = ((bytes + ctas - 1) / ctas + 15) / 16 * 16;  // every byte in some CTA's share
  stream_read_kernel<<<ctas, 32, kSmem, stream>>>(static_cast<const unsigned char*>(src), bytes, std::max<size_t>(share, 16));
  return cudaGetLastError();
}

}  // namespace pdserve::cuda::bench
