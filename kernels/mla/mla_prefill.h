// MLA prefill attention on tensor cores (issue 12): a chunk of new tokens per sequence, causal
// within itself, against its paged prefix, ragged batches. Same contract as the model layer's
// prefill (detail::mla_layer, src/model/attention_layers.cpp) from q to the per-head values
// before the output gate: for new token i of sequence s (position p = cached_len + i), head h,
//   out[row, h] = sum_{j <= p} softmax_j(scale * q[row,h] . k_j,h) v_j,h
// where k_j,h = [W_kb[h] latent_j | key_j] (qk = nope + rope) and v_j,h = W_vb[h] latent_j,
// i.e. the EXPANDED form of the absorbed latent attention (ops/mla.h): the same numbers in
// exact arithmetic. Expanded, because at 24 heads a rank each (query, key) pair costs
// 2 x (192 + 128) FLOPs against 2 x (576 + 512) absorbed, and the up-projection of the context
// (ctx x 512 x heads*256 x 2 FLOPs) is under a tenth of the attention at 8K x 16K.
//
// Precision: q, the latents, kv_b, the expanded K/V and the probabilities are rounded to bf16
// once (fp32 accumulate everywhere, fp32 softmax state); out is fp32. Error bound vs the fp32
// reference in tests/mla_prefill_test.cpp (normalised max error).
//
// Run (mla_prefill_run): three steps, five launches on one stream, no host sync (prefill steps
// run eagerly; no CUDA graph holds them today):
//   1. gather: every context token's cache entry -> latent bf16 [ctx][lat] + key part into K
//      (an fp32 cache rounded to nearest even; a bf16 cache, MlaPrefillArgs::cache_bf16, its
//      bits copied: the same bf16 inputs for the same bf16-representable values, so from here on
//      both caches give bit-identical outputs); kv_b -> bf16; q -> bf16
//   2. expand: [ctx][lat] x kv_b^T (bf16, fp32 acc) -> K nope part and V, bf16; plan.expand picks
//      the GEMM (default kWgmma: warpgroup MMA, mla_prefill_expand_wgmma_sm90.cu; kMmaSync kept
//      as the fallback for other head dims and for comparison)
//   3. attend (plan.kernel picks; default kWgmmaTmaPingpong): flash attention on warpgroup MMA
//      (mla_prefill_wgmma_tma_sm90.cu: two consumer warpgroups of 64 rows taking turns at the
//      tensor cores, key tiles of 128, swizzled shared-memory tiles filled by a producer warp's
//      bulk tensor copies; the cp.async forms in mla_prefill_wgmma_sm90.cu), or the fallback
//      kMmaSync: mma.sync m16n8k16 bf16, fp32 online softmax; CTA = 128 query
//      rows x one head, 8 warps of 16 rows; K/V tiles of 64 tokens double-buffered with
//      cp.async; key tiles past the tile's last query position are never visited (causal
//      skipping), masking only on tiles that cross the diagonal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

// Query rows per CTA (16 per warp): 128 (8 warps, one CTA an SM) or 64 (4 warps, two an SM).
// Keys per K/V tile of the mma.sync kernel: 64 in both (the wgmma kernels: 128 rows, 128 keys).
inline constexpr int64_t kMlaPrefillTileRows = 128;
inline constexpr int64_t kMlaPrefillKeyTile = 64;

// Which attention kernel a plan runs. kMmaSync: warp mma.sync m16n8k16 (any compiled head dims,
// 128- or 64-row tiles). kWgmma: Hopper warpgroup MMA (two warpgroups of 64 rows, key tiles of
// 128, S of one tile issued with P V of the previous); kWgmmaPingpong: the same with the two
// warpgroups taking turns at the tensor cores; kWgmmaSerial: S, softmax, P V one after the other
// (kept for comparison); kWgmmaTma / kWgmmaTmaPingpong: the overlapped / pingpong forms fed by a
// producer warp (bulk tensor copies into a 2-stage K ring and a 2-stage V ring, full/empty
// mbarriers, no CTA barrier in the main loop). All wgmma forms: 128-row tiles, qk 192 x v 128 only
// (other head dims fall back to kMmaSync).
enum class MlaPrefillKernel { kMmaSync, kWgmma, kWgmmaPingpong, kWgmmaSerial, kWgmmaTma, kWgmmaTmaPingpong };
inline constexpr MlaPrefillKernel kMlaPrefillDefaultKernel = MlaPrefillKernel::kWgmmaTmaPingpong;

// Which GEMM up-projects the context (step 2). kMmaSync: warp mma.sync, 64 x 64 tiles, any
// compiled head dims. kWgmma: warpgroup MMA, persistent CTAs of 128 tokens x one head's 256
// columns (nope 128 + v 128), a 4-stage cp.async ring; nope 128 x v 128 with latent_dim % 64 == 0
// only (other dims fall back to kMmaSync).
enum class MlaPrefillExpand { kMmaSync, kWgmma };
inline constexpr MlaPrefillExpand kMlaPrefillDefaultExpand = MlaPrefillExpand::kWgmma;

struct MlaPrefillSeq {
  int64_t row_begin = 0;   // first row of its new tokens in q / out
  int64_t new_len = 0;     // new tokens (>= 1)
  int64_t cached_len = 0;  // prefix already in the pages (its entries are read, not written)
  const int32_t* pages = nullptr;  // host: the sequence's block table, >= ceil((cached+new)/page) ids
};

// Flat int32 image for the device: header [0] seqs, [1] tiles, [2] ctx_total, [3] rows;
// from word 4: seqs x {row_begin, new_len, cached_len, kv_begin}, tiles x {seq, first row},
// ctx_total cache entries (page * page_size + offset) of every sequence's context in order.
// Tiles are ordered by descending keys visited so long tiles start first.
struct MlaPrefillPlan {
  int64_t seqs = 0, tiles = 0, ctx_total = 0, rows = 0;
  int64_t tile_rows = kMlaPrefillTileRows;  // the kernel variant runs tiles of this many rows
  MlaPrefillKernel kernel = kMlaPrefillDefaultKernel;
  MlaPrefillExpand expand = kMlaPrefillDefaultExpand;  // set after building to pick the other GEMM
  std::vector<int32_t> image;
};
// tile_rows: 128 or 64 (64 kept for comparison, mma.sync only).
Status build_mla_prefill_plan(const std::vector<MlaPrefillSeq>& seqs, int64_t page_size, MlaPrefillPlan* plan,
                              int64_t tile_rows = kMlaPrefillTileRows, MlaPrefillKernel kernel = kMlaPrefillDefaultKernel);

struct MlaPrefillArgs {
  const float* q = nullptr;      // [rows][heads][nope + rope]
  const float* cache = nullptr;  // one layer's pages [pages][page_size][latent_dim + rope]
  // Non-null: the layer's pages hold bf16 entries (the same layout, uint16_t bf16 bit patterns;
  // the bf16 latent cache, kv_cache_dtype "bfloat16") and `cache` is unused.
  const uint16_t* cache_bf16 = nullptr;
  const float* kv_b = nullptr;   // [heads * (nope + v_dim)][latent_dim]
  int64_t heads = 0, nope = 0, rope = 0, v_dim = 0, latent_dim = 0;
  float scale = 1.0f;
  float* out = nullptr;          // [rows][heads][v_dim]
};

// The head shapes with a compiled kernel: qk (nope + rope) x v in {192 x 128 (K3), 32 x 16
// (the tiny test models)}, nope even, latent_dim % 32 == 0.
bool mla_prefill_supported(int64_t nope, int64_t rope, int64_t v_dim, int64_t latent_dim);

// Device scratch the run needs for a plan of these sizes.
size_t mla_prefill_workspace_bytes(const MlaPrefillArgs& a, int64_t rows, int64_t ctx_total);

// plan: the image on the device; plan_host: its sizes. workspace: >= the bytes above.
Status mla_prefill_run(const MlaPrefillArgs& a, const MlaPrefillPlan& plan_host, const int32_t* plan, void* workspace,
                       cudaStream_t stream);

// Steps 1-2 alone (gather + expand into the workspace; benchmarks time them by themselves).
Status mla_prefill_expand(const MlaPrefillArgs& a, const MlaPrefillPlan& plan_host, const int32_t* plan, void* workspace,
                          cudaStream_t stream);

// The context gather of step 1 alone (every context token's entry -> the workspace's bf16
// latents and K rope tails, from `cache` or `cache_bf16`; benchmarks time it by itself).
Status mla_prefill_gather(const MlaPrefillArgs& a, const MlaPrefillPlan& plan_host, const int32_t* plan, void* workspace,
                          cudaStream_t stream);

// The up-projection GEMM alone (step 2) on bf16 inputs: lat [ctx][latent_dim], w (kv_b)
// [heads * (nope + v_dim)][latent_dim] -> kb[t][h][0, nope) (the rope tail untouched) and
// vb [ctx][heads][v_dim]. kind falls back to kMmaSync where kWgmma has no kernel.
Status mla_prefill_expand_gemm(const void* lat, const void* w, int64_t ctx, int64_t heads, int64_t nope, int64_t rope, int64_t v_dim,
                               int64_t latent_dim, void* kb, void* vb, MlaPrefillExpand kind, cudaStream_t stream);

// Step 3 alone on already-expanded bf16 inputs (benchmarks time the attention by itself):
// qb [rows][heads][qk], kb [ctx][heads][qk], vb [ctx][heads][v_dim].
Status mla_prefill_attend(const void* qb, const void* kb, const void* vb, int64_t heads, int64_t qk, int64_t v_dim, float scale,
                          const MlaPrefillPlan& plan_host, const int32_t* plan, float* out, cudaStream_t stream);

}  // namespace pdserve::cuda
