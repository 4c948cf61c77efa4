// mla_absorb_q (mla.h) for a programmatic dependent kernel after it: the split-KV decode's early
// rings (mla_decode.h, MlaDecodeRing::kLeanEarly / kLeanBlockEarly), issue 12.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

// mla_absorb_q's sums and outputs, bit for bit, whose CTAs execute griddepcontrol.launch_dependents
// FIRST: a kernel launched after it with the programmatic-serialization attribute (pdl) may start
// once every CTA of it has started, i.e. while it still computes q_lat / q_rot (that kernel must
// read them only after its griddepcontrol.wait, which waits for this kernel's completion and
// memory flush). Launched like mla_absorb_q, as a PLAIN launch (never pdl), so it starts only after
// every kernel before it on the stream has completed: when its dependent starts, everything
// written before this kernel (the step's mla_write_latents included) is complete and visible, and
// this kernel writes nothing but q_lat / q_rot. That is what lets the CUDA backend's MLA run pass
// MlaDecodeWork::new_tokens = 0 (cuda_layers.cpp; docs/design.md "MLA split-KV decode").
// The trigger is a no-op when the next kernel is not a pdl launch (it then starts after this one
// completes, as after mla_absorb_q).
Status mla_absorb_q_early(const float* q, const float* kv_b, int64_t rows, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                          int64_t latent_dim, float* q_lat, float* q_rot, cudaStream_t stream);

}  // namespace pdserve::cuda
