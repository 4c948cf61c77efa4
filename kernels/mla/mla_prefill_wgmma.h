// Internal: the wgmma attention step of the MLA prefill (mla_prefill_wgmma_sm90.cu), called by
// mla_prefill_attend when the plan asks for MlaPrefillKernel::kWgmma.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mla/mla_prefill.h"

namespace pdserve::cuda {

// Head dims the wgmma kernel is compiled for (qk 192 x v 128); others take the mma.sync kernel.
bool mla_prefill_wgmma_has_kernel(int64_t qk, int64_t v_dim);

// Same inputs as mla_prefill_attend; plan_host.tile_rows must be 128.
Status mla_prefill_attend_wgmma(const void* qb, const void* kb, const void* vb, int64_t heads, float scale,
                                const MlaPrefillPlan& plan_host, const int32_t* plan, float* out, cudaStream_t stream);

// The TMA producer-warp forms (kWgmmaTma, kWgmmaTmaPingpong; mla_prefill_wgmma_tma_sm90.cu). Q, K
// and V must be the dense [plan rows or ctx_total][heads][dim] buffers the run expands (the tensor
// maps are built over exactly those extents).
Status mla_prefill_attend_wgmma_tma(const void* qb, const void* kb, const void* vb, int64_t heads, float scale,
                                    const MlaPrefillPlan& plan_host, const int32_t* plan, float* out, cudaStream_t stream);

}  // namespace pdserve::cuda
