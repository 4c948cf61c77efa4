// Internal: the push and stream plans' launchers (kda_decode_push_sm90.cu,
// kda_decode_stream_sm90.cu), called by kda_decode_step.
#pragma once

#include <cuda_runtime.h>

#include "kda/kda.h"

namespace pdserve::cuda {

// Needs head_dim 128 and conv kernel 4; (rows_per_warp, warps) in {2,4,8,16} x {4,8} or (8, 16).
Status kda_decode_push_step(const KdaDecodeArgs& a, int rows_per_warp, int warps, cudaStream_t stream);
// Needs head_dim 128 and conv kernel 4; (warps, rows_per_warp, stages) in (4, 4, 4 or 6), (4, 2, 6),
// (4, 8, 3), (8, 4, 3); stages 0 = the shape's default.
Status kda_decode_stream_step(const KdaDecodeArgs& a, int rows_per_warp, int warps, int stages, cudaStream_t stream);

}  // namespace pdserve::cuda
