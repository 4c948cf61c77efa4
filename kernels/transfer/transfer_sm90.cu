// pack_runs / unpack_runs (contract: transfer.h): one block per chunk, grid-stride over
// the chunks; 16-byte accesses when both ends of a chunk are 16-byte aligned.
#include <algorithm>

#include "common/cuda_check.h"
#include "transfer/transfer.h"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 256;

// pack: src offset = chunk.src_offset, dst offset = chunk.staging_offset;
// unpack: src offset = chunk.staging_offset, dst offset = chunk.dst_offset.
template <bool kPack>
__global__ void __launch_bounds__(kThreads) copy_chunks(const float* __restrict__ src, const TransferChunk* __restrict__ chunks,
                                                        int64_t num_chunks, float* __restrict__ dst) {
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const TransferChunk ch = chunks[c];
    const float* s = src + (kPack ? ch.src_offset : ch.staging_offset);
    float* d = dst + (kPack ? ch.staging_offset : ch.dst_offset);
    const int64_t n = ch.length;
    if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15u) == 0) {
      const int64_t n4 = n / 4;
      const float4* s4 = reinterpret_cast<const float4*>(s);
      float4* d4 = reinterpret_cast<float4*>(d);
      for (int64_t i = threadIdx.x; i < n4; i += kThreads) d4[i] = s4[i];
      for (int64_t i = n4 * 4 + threadIdx.x; i < n; i += kThreads) d[i] = s[i];
    } else {
      for (int64_t i = threadIdx.x; i < n; i += kThreads) d[i] = s[i];
    }
  }
}

unsigned grid_for(int64_t num_chunks) {
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return static_cast<unsigned>(std::min<int64_t>(num_chunks, int64_t(sms) * 8));
}

}  // namespace

Status pack_runs(const float* pool, const TransferChunk* chunks, int64_t num_chunks, float* staging, cudaStream_t stream) {
  if (num_chunks == 0) return Status::ok();
  copy_chunks<true><<<grid_for(num_chunks), kThreads, 0, stream>>>(pool, chunks, num_chunks, staging);
  return last_launch_status("pack_runs");
}

Status unpack_runs(const float* staging, const TransferChunk* chunks, int64_t num_chunks, float* pool, cudaStream_t stream) {
  if (num_chunks == 0) return Status::ok();
  copy_chunks<false><<<grid_for(num_chunks), kThreads, 0, stream>>>(staging, chunks, num_chunks, pool);
  return last_launch_status("unpack_runs");
}

}  // namespace pdserve::cuda
