// The prefill grouped GEMM's tile order and the warpgroup variant's input order
// (moe_prefill.h), on the host and the device so that tests can check them without a GPU.
// Internal to kernels/moe.
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

// kWgmma's input order: where input j (0..31) of each 32-input group sits in x_sorted / act.
// wgmma reads B (the tokens) from shared memory in k16 steps of consecutive positions, while
// the decode layout gives lane (g, t) of the weights (A, in registers, the m16n8k16 fragment:
// k slots 2t, 2t + 1, 2t + 8, 2t + 9) the inputs 8t .. 8t + 7 of a group; its k-step h of
// the group takes 8t + 4h + {0, 1} (slots 2t, 2t + 1) and 8t + 4h + {2, 3} (slots 2t + 8,
// 2t + 9). So input j = 8t + 4h + 2w + p goes to position 16h + 2(4w + t) + p. Pairs (j even,
// j + 1) stay adjacent, which keeps bf16x2 stores whole.
PDS_HOST_DEVICE constexpr int wgmma_k_position(int j) {
  const int t = j >> 3, h = (j >> 2) & 1, w = (j >> 1) & 1;
  return 16 * h + 2 * (4 * w + t) + (j & 1);
}

}  // namespace pdserve::cuda::moe_prefill_detail

#undef PDS_HOST_DEVICE
