// Packing state runs into a contiguous staging buffer on the device and unpacking them into
// a destination pool: the device side of moving MLA latent pages and KDA state slots between
// engines (disagg). A run copies `length` floats; offsets are floats from the pool base the
// launcher is given. For the KDA state that base is a slot's base and the runs are those of
// disagg/state_slicing.h's plan for one (src_rank, dst_rank) pair, field for field; for the
// MLA latent it is the pool base (layer-major pages, cache_pools.h) and mla_page_runs below
// lists the runs.
//
// Staging layout: the runs in list order, each starting at a multiple of 4 floats (a run
// whose length is not a multiple of 4 leaves up to 3 unused floats after it), so sender and
// receiver derive the same layout from the same run list. plan_transfer_chunks splits the
// runs into chunks of at most kTransferChunkFloats for the kernels (one block per chunk, so
// few large runs still spread over the whole chip). A chunk copies with 16-byte accesses
// when its source and destination addresses are both 16-byte aligned, else with 4-byte ones.
// Destinations of different runs must not overlap; sources may.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

struct TransferRun {
  int64_t src_offset = 0;  // floats from the source pool's base
  int64_t dst_offset = 0;  // floats from the destination pool's base
  int64_t length = 0;      // floats
};

// What the kernels read (device array): one piece of a run and its place in staging.
struct TransferChunk {
  int64_t src_offset, dst_offset, staging_offset, length;
};

inline constexpr int64_t kTransferChunkFloats = 8192;  // 32 KiB

// Host: the chunks of `runs` and the staging size in floats (the padded layout above).
std::vector<TransferChunk> plan_transfer_chunks(const std::vector<TransferRun>& runs, int64_t* staging_floats);

// Host: one run per (layer, page) for moving a request's MLA latent pages between two pools
// of the same geometry: src_pages[i] -> dst_pages[i] in every layer, layer-major.
std::vector<TransferRun> mla_page_runs(int64_t layers, int64_t layer_stride, int64_t page_floats,
                                       const std::vector<int32_t>& src_pages, const std::vector<int32_t>& dst_pages);

// staging[chunk.staging_offset + i] = pool[chunk.src_offset + i] for every chunk.
Status pack_runs(const float* pool, const TransferChunk* chunks, int64_t num_chunks, float* staging, cudaStream_t stream);
// pool[chunk.dst_offset + i] = staging[chunk.staging_offset + i] for every chunk.
Status unpack_runs(const float* staging, const TransferChunk* chunks, int64_t num_chunks, float* pool, cudaStream_t stream);

}  // namespace pdserve::cuda
