// Packing state runs into a contiguous staging buffer on the device and unpacking them into
// a destination pool: the device side of moving MLA latent pages and KDA state slots between
// engines (disagg). Byte-generic: a pool is an array of elements of elem_bytes bytes (1, 2 or
// 4: the fp32 KDA state and fp32 latent cache 4, the bf16 latent cache 2), and every offset and
// length is in those elements. A run copies `length` elements; offsets are elements from the
// pool base the launcher is given. For the KDA state (fp32) that base is a slot's base and the
// runs are those of disagg/state_slicing.h's plan for one (src_rank, dst_rank) pair, field for
// field; for the MLA latent it is the pool base (layer-major pages, cache_pools.h) and
// mla_page_runs below lists the runs (in elements of the pool's dtype).
//
// Staging layout: the runs in list order, each starting at a multiple of 16 bytes (a run whose
// byte length is not a multiple of 16 leaves up to 15 unused bytes after it), so sender and
// receiver derive the same layout from the same run list and element size. plan_transfer_chunks
// splits the runs into chunks of at most kTransferChunkBytes for the kernels (one block per
// chunk, so few large runs still spread over the whole chip). A chunk copies with 16-byte
// accesses when its source and destination addresses are both 16-byte aligned, else element by
// element. Destinations of different runs must not overlap; sources may. The copy moves bits:
// a bf16 page arrives with exactly the bits it left with.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

struct TransferRun {
  int64_t src_offset = 0;  // elements from the source pool's base
  int64_t dst_offset = 0;  // elements from the destination pool's base
  int64_t length = 0;      // elements
};

// What the kernels read (device array): one piece of a run and its place in staging (elements).
struct TransferChunk {
  int64_t src_offset, dst_offset, staging_offset, length;
};

inline constexpr int64_t kTransferChunkBytes = 32768;  // 32 KiB
inline constexpr int64_t kTransferChunkFloats = kTransferChunkBytes / 4;

// Host: the chunks of `runs` and the staging size in elements (the padded layout above) for
// elements of elem_bytes bytes (1, 2 or 4; anything else: no chunks, staging 0).
std::vector<TransferChunk> plan_transfer_chunks(const std::vector<TransferRun>& runs, int64_t* staging_elems, int64_t elem_bytes = 4);

// Host: one run per (layer, page) for moving a request's MLA latent pages between two pools
// of the same geometry and dtype: src_pages[i] -> dst_pages[i] in every layer, layer-major.
// Units are the pool's elements (an fp32 or a bf16 pool alike): page_elems = page_size *
// (latent + rope), layer_stride = pages * page_elems.
std::vector<TransferRun> mla_page_runs(int64_t layers, int64_t layer_stride, int64_t page_elems,
                                       const std::vector<int32_t>& src_pages, const std::vector<int32_t>& dst_pages);

// staging[chunk.staging_offset + i] = pool[chunk.src_offset + i] for every chunk (elements of
// elem_bytes bytes; the chunks planned with the same elem_bytes).
Status pack_runs(const void* pool, int64_t elem_bytes, const TransferChunk* chunks, int64_t num_chunks, void* staging, cudaStream_t stream);
// pool[chunk.dst_offset + i] = staging[chunk.staging_offset + i] for every chunk.
Status unpack_runs(const void* staging, int64_t elem_bytes, const TransferChunk* chunks, int64_t num_chunks, void* pool, cudaStream_t stream);

// The fp32 forms (elem_bytes 4).
inline Status pack_runs(const float* pool, const TransferChunk* chunks, int64_t num_chunks, float* staging, cudaStream_t stream) {
  return pack_runs(pool, 4, chunks, num_chunks, staging, stream);
}
inline Status unpack_runs(const float* staging, const TransferChunk* chunks, int64_t num_chunks, float* pool, cudaStream_t stream) {
  return unpack_runs(staging, 4, chunks, num_chunks, pool, stream);
}

}  // namespace pdserve::cuda
