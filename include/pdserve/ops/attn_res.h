// Kimi-K3 attention residuals: the input of an attention or MLP block is a softmax-weighted
// mix over sources [bank..., partial], where each source is RMS-normalised (no weight) and
// scored against one learned vector (the norm's weight times the 1-row projection).
#pragma once

#include <cstdint>

namespace pdserve::ops {

// sources: `count` pointers to rows of `dim` floats. score_vec: [dim]. out: [dim].
void attn_res_mix(const float* const* sources, int count, int64_t dim, const float* score_vec, float eps, float* out);

}  // namespace pdserve::ops
