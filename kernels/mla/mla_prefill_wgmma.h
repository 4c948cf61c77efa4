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

// The up-projection GEMM on warpgroup MMA (MlaPrefillExpand::kWgmma, mla_prefill_expand_wgmma_sm90.cu):
// nope 128 x v 128 (one head's 256 output columns a tile), latent_dim % 64 == 0.
bool mla_prefill_expand_wgmma_has_kernel(int64_t nope, int64_t v_dim, int64_t latent_dim);
// lat [ctx][latent_dim] and w [heads * 256][latent_dim] bf16 -> kb[t][h][0, 128) (row stride
// heads * qk) and vb [ctx][heads][128], bf16. Pointers 16-byte aligned. max_ctas > 0 caps the
// persistent grid (tests use it to give each CTA several tiles); 0: one CTA an SM.
Status mla_prefill_expand_wgmma(const void* lat, const void* w, int64_t ctx, int64_t heads, int64_t qk, int64_t latent_dim, void* kb,
                                void* vb, cudaStream_t stream, int max_ctas = 0);

}  // namespace pdserve::cuda
