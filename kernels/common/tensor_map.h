// Bulk tensor copies (TMA) need a CUtensorMap built on the host by the driver's
// cuTensorMapEncodeTiled. The project links only the runtime, so the encoder is looked up
// once through cudaGetDriverEntryPointByVersion and shared by every kernel family.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

// How far the L2 widens a tensor copy's requests (CUtensorMapL2promotion). A stream read once
// (the MLA decode's latent pages) copies at 4.1-4.2 TB/s on an H200 with 256-byte promotion and at
// 4.3-4.5 with 128 bytes or none, as fast as plain bulk copies (docs/perf.md, "The load path alone",
// eighteenth session).
enum class L2Promotion { kNone, k128, k256 };

// A map over a bf16 tensor of `rank` dimensions (1 to 5, innermost first): `extent` elements
// per dimension, `stride_bytes` between consecutive indices of dimensions 1..rank-1, and a
// copy box of `box` elements per dimension. 128-byte swizzle (the wgmma operand layout),
// `promotion` (256 bytes unless a caller measured better), zeros for reads past the extent.
// `who` names the caller in errors.
Status encode_bf16_tensor_map(CUtensorMap* map, const void* base, int rank, const uint64_t* extent,
                              const uint64_t* stride_bytes, const uint32_t* box, const char* who,
                              L2Promotion promotion = L2Promotion::k256);

// A two-dimensional map over 32-bit words with no swizzle (raw bytes copied row by row, e.g.
// packed weights): `extent` words per dimension, `stride_bytes` between rows, box `box`.
Status encode_u32_tensor_map_2d(CUtensorMap* map, const void* base, const uint64_t* extent, uint64_t stride_bytes, const uint32_t* box,
                                const char* who);

}  // namespace pdserve::cuda
