// Host-side planning for transfer.h: run lists -> kernel chunks and the staging layout.
#include <algorithm>

#include "transfer/transfer.h"

namespace pdserve::cuda {

std::vector<TransferChunk> plan_transfer_chunks(const std::vector<TransferRun>& runs, int64_t* staging_elems, int64_t elem_bytes) {
  std::vector<TransferChunk> chunks;
  int64_t staging = 0;
  if (elem_bytes == 1 || elem_bytes == 2 || elem_bytes == 4) {
    const int64_t max_chunk = kTransferChunkBytes / elem_bytes, align = 16 / elem_bytes;  // elements
    for (const TransferRun& r : runs) {
      for (int64_t done = 0; done < r.length; done += max_chunk) {
        const int64_t n = std::min(max_chunk, r.length - done);
        chunks.push_back({r.src_offset + done, r.dst_offset + done, staging + done, n});
      }
      staging += (r.length + align - 1) / align * align;
    }
  }
  if (staging_elems) *staging_elems = staging;
  return chunks;
}

std::vector<TransferRun> mla_page_runs(int64_t layers, int64_t layer_stride, int64_t page_elems,
                                       const std::vector<int32_t>& src_pages, const std::vector<int32_t>& dst_pages) {
  std::vector<TransferRun> runs;
  const size_t n = std::min(src_pages.size(), dst_pages.size());
  runs.reserve(layers * n);
  for (int64_t l = 0; l < layers; ++l)
    for (size_t i = 0; i < n; ++i)
      runs.push_back({l * layer_stride + src_pages[i] * page_elems, l * layer_stride + dst_pages[i] * page_elems, page_elems});
  return runs;
}

}  // namespace pdserve::cuda
