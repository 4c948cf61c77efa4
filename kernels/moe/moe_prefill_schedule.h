// The prefill grouped GEMM's tile order (moe_prefill.h), on the host and the device so that
// tests can check it without a GPU. Internal to kernels/moe.
#pragma once

#if defined(__CUDACC__)
#define PDS_HOST_DEVICE __host__ __device__
#else
#define PDS_HOST_DEVICE
#endif

namespace pdserve::cuda::moe_prefill_detail {

// Tile `local` (0 .. out_tiles * mtiles - 1) of one expert -> (output tile, token tile). The
// token tiles of one output tile stay adjacent (CTAs running together share its weights in
// L2), but their order rotates with the output tile: persistent CTAs stride over the list
// by the CTA count, and without the rotation a count divisible by mtiles (132 CTAs, 3 token
// tiles at 146 rows) hands one CTA in three only the short last token tiles.
PDS_HOST_DEVICE inline void prefill_tile_coords(int local, int mtiles, int* ot, int* mt) {
  *ot = local / mtiles;
  *mt = (local - *ot * mtiles + *ot) % mtiles;
}

}  // namespace pdserve::cuda::moe_prefill_detail

#undef PDS_HOST_DEVICE
