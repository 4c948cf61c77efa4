// pack_runs / unpack_runs (contract: transfer.h): one block per chunk, grid-stride over the
// chunks; elements of 1, 2 or 4 bytes (copied as bits); 16-byte accesses when both ends of a
// chunk are 16-byte aligned.
#include <algorithm>

#include "common/cuda_check.h"
#include "transfer/transfer.h"

namespace pdserve::cuda {

namespace {

constexpr int kThreads = 256;

// pack: src offset = chunk.src_offset, dst offset = chunk.staging_offset;
// unpack: src offset = chunk.staging_offset, dst offset = chunk.dst_offset. T: the element's bits.
template <bool kPack, typename T>
__global__ void __launch_bounds__(kThreads) copy_chunks(const T* __restrict__ src, const TransferChunk* __restrict__ chunks,
                                                        int64_t num_chunks, T* __restrict__ dst) {
  constexpr int64_t kPer = 16 / sizeof(T);  // elements per 16-byte access
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const TransferChunk ch = chunks[c];
    const T* s = src + (kPack ? ch.src_offset : ch.staging_offset);
    T* d = dst + (kPack ? ch.staging_offset : ch.dst_offset);
    const int64_t n = ch.length;
    if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15u) == 0) {
      const int64_t n16 = n / kPer;
      const uint4* s4 = reinterpret_cast<const uint4*>(s);
      uint4* d4 = reinterpret_cast<uint4*>(d);
      for (int64_t i = threadIdx.x; i < n16; i += kThreads) d4[i] = s4[i];
      for (int64_t i = n16 * kPer + threadIdx.x; i < n; i += kThreads) d[i] = s[i];
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

template <bool kPack>
Status launch(const void* src, int64_t elem_bytes, const TransferChunk* chunks, int64_t num_chunks, void* dst, cudaStream_t stream,
              const char* what) {
  if (num_chunks == 0) return Status::ok();
  const unsigned grid = grid_for(num_chunks);
  switch (elem_bytes) {
    case 4:
      copy_chunks<kPack><<<grid, kThreads, 0, stream>>>(static_cast<const uint32_t*>(src), chunks, num_chunks, static_cast<uint32_t*>(dst));
      break;
    case 2:
      copy_chunks<kPack><<<grid, kThreads, 0, stream>>>(static_cast<const uint16_t*>(src), chunks, num_chunks, static_cast<uint16_t*>(dst));
      break;
    case 1:
      copy_chunks<kPack><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(src), chunks, num_chunks, static_cast<uint8_t*>(dst));
      break;
    default:
      return invalid_argument(std::string(what) + ": element size must be 1, 2 or 4 bytes, not " + std::to_string(elem_bytes));
  }
  return last_launch_status(what);
}

}  // namespace

Status pack_runs(const void* pool, int64_t elem_bytes, const TransferChunk* chunks, int64_t num_chunks, void* staging, cudaStream_t stream) {
  return launch<true>(pool, elem_bytes, chunks, num_chunks, staging, stream, "pack_runs");
}

Status unpack_runs(const void* staging, int64_t elem_bytes, const TransferChunk* chunks, int64_t num_chunks, void* pool, cudaStream_t stream) {
  return launch<false>(staging, elem_bytes, chunks, num_chunks, pool, stream, "unpack_runs");
}

}  // namespace pdserve::cuda
