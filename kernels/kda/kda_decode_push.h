// Internal: the push plan's launcher (kda_decode_push_sm90.cu), called by kda_decode_step.
#pragma once

#include <cuda_runtime.h>

#include "kda/kda.h"

namespace pdserve::cuda {

// Needs head_dim 128 and conv kernel 4; (rows_per_warp, warps) in {2,4,8,16} x {4,8} or (8, 16).
Status kda_decode_push_step(const KdaDecodeArgs& a, int rows_per_warp, int warps, cudaStream_t stream);

}  // namespace pdserve::cuda
