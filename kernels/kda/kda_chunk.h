// Chunked KDA prefill on tensor cores (mma.sync m16n8k8 in tf32, 3xTF32 or, opt-in, bf16 - whose
// serial state kernel runs on wgmma by default at D = 128; fp32 accumulation and state).
// Contract = ops::kda_recurrent / ops::kda_chunked (include/pdserve/ops/kda.h), for a ragged
// batch of sequences packed without padding:
//   q, k, g, v, o  [T][H][D] fp32, rows of sequence s are cu_seqlens[s] .. cu_seqlens[s+1]-1;
//                  q, k already L2-normalised (q scaled by D^-0.5), g the log decay per key
//                  channel, so each token's decay is exp(g) in (0, 1].
//   beta           [T][H] (after the sigmoid).
//   state          sequence s starts from, and leaves its final state in,
//                  state + slots[s] * slot_stride + layer_offset, laid out [H][V][K] fp32
//                  (the slot pool layout of the decode step, kda.h).
// Requires D in {32, 64, 128} (kda_chunk_supported) and every g >= kMinLogDecay: inside a
// 16-token block the kernel factors exp(G_i - G_j) into two exponentials about the block's
// middle, each bounded by exp(8 * |g|max); with |g| <= 10 both stay within fp32's range.
// (Kimi-K3's gate is bounded below by -5; the unbounded softplus gate takes kda_recurrent.)
// Slots must be distinct within a call. cu_seqlens and slots live on the host (prefill
// batches are planned there); the launcher uploads small job tables (every pass's) to the
// workspace's front, which later calls for the same batch (the other KDA layers of a step)
// may reuse (KdaChunkArgs::tables_uploaded).
// Not graph-capturable (host tables, pageable uploads): prefill runs eagerly. (With
// tables_uploaded there is no upload; the pipelined schedule - bf16 mode's pick with the
// mma.sync state kernel, and with the wgmma one for passes of >= kKdaChunkMulticastMinChunks
// chunks - then captures too: its second stream is forked from and joined to the caller's with events.)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kda/kda_chunk_plan.h"  // kKdaChunk, workspace sizing
#include "pdserve/core/status.h"

namespace pdserve::cuda {

inline constexpr float kKdaChunkMinLogDecay = -10.0f;  // smallest g the factored exponentials allow

// Where o = q S + intra-chunk attention is computed (docs/design.md "Chunked prefill").
enum class KdaChunkOutput : int {
  kPick = 0,      // per pass, by the launcher's measured rule (kda_chunk.cpp)
  kInState = 1,   // inside the serial state-passing kernel
  kSeparate = 2,  // the state kernel stores each chunk's state; a parallel kernel computes o
};

struct KdaChunkArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  float* o = nullptr;
  int64_t heads = 0, head_dim = 0;
  int64_t num_seqs = 0;
  const int64_t* cu_seqlens = nullptr;  // host, num_seqs + 1, cu_seqlens[0] == 0
  const int32_t* slots = nullptr;       // host, num_seqs
  float* state = nullptr;               // the slot pool
  int64_t slot_stride = 0;              // floats between slots
  int64_t layer_offset = 0;             // floats from a slot's start to this layer's [H][V][K]
  void* workspace = nullptr;            // device, 256-byte aligned
  size_t workspace_bytes = 0;           // >= kda_chunk_workspace_bytes(heads, head_dim, 1)
  int state_tile = 0;                   // value rows per state-passing block: 16, 32, 64 (0: pick)
  // Buffers for each chunk's w, qg in the state-passing block: 1, 2 (prefetch a chunk further
  // ahead; falls back to 1 where shared memory is short: D = 128 at tile 64) or 0: pick (2,
  // except 1 for the packed bf16 workspace's state kernel when pipelined: room for an intra CTA).
  // The wgmma state kernel (state_mma) takes them as stages of all a chunk's inputs, and 3:
  // three stages at tile 32 (211 KB of shared memory; 2 at tile 64; the mma.sync kernel: 2).
  int state_buffers = 0;
  // Warps of the in-state serial kernel (the output in the state kernel): 8, 16 (twice the
  // warps an SM to hide its latency chain; used at D = 128 with state tiles 32 / 64, else 8;
  // the packed bf16 workspace's kernel too) or 0: pick (8: 16 made the fp32-workspace state
  // kernel 14-19% slower on the H200, docs/perf.md "bf16 mode", and the packed one at tile 64
  // 1-2% slower than 8 warps, docs/perf.md "Packed state kernel on 16 warps").
  int state_warps = 0;
  // true: every matmul in error-compensated 3xTF32 (operands split hi + lo, ~fp32 accuracy,
  // 3x the tensor-core work); false: plain tf32 (10-bit mantissa). See docs/design.md.
  bool precise = true;
  // true (opt-in, overrides precise): every matmul's operands rounded to bf16 (8-bit mantissa;
  // fp32 accumulation, the state and the intra-chunk solve stay fp32): fla chunk_kda's
  // precision class, ~5e-3 normalised error, beyond the backend's 1e-4 CPU-vs-CUDA bound, so
  // never the backend's default (docs/perf.md "bf16 mode").
  bool bf16 = false;
  KdaChunkOutput output = KdaChunkOutput::kPick;
  // bf16 mode with the output in the state kernel: the intra kernel's w, qg, Aqk, kg in
  // bf16 in the workspace (half its writes; the state kernel stages them as they are, in 83.5
  // KB instead of 157.5 KB of shared memory at D = 128, tile 32, one buffer: an intra CTA fits
  // beside it). The same bf16 operands as the fp32 workspace, summed in another k order
  // (docs/perf.md "Packed bf16 workspace"). 0: pick (kKdaChunkPackBf16), 1: fp32 workspace, 2:
  // packed. Other modes ignore it.
  int bf16_workspace = 0;
  // bf16 mode's intra kernel: 0: pick (1), 1: k and q staged as fp32 (112 KB shared memory at
  // D = 128), 2: k and q staged as bf16 (80 KB; docs/perf.md "bf16 k and q staging"; 3-5%
  // slower on the H200, so not the pick). The same arithmetic but for k and q's bf16 rounding
  // before their decays.
  int bf16_intra = 0;
  // The packed state kernel's L2 prefetch: while it runs chunk n, chunk n + d's inputs are
  // requested into L2 (one bulk prefetch a region). 0: pick (kKdaChunkStatePrefetch: off; on
  // the H200 every d measured made the state kernel 13-17% slower, docs/perf.md "State
  // kernel: bf16 B operands, L2 prefetch"), -1: off, 1 .. 8: d. Results do not depend on it.
  int state_prefetch = 0;
  // The packed bf16 workspace's state kernel: 0: pick (kKdaChunkStateMma; kKdaChunkMulticastStateMma
  // for the one-sequence passes of kKdaChunkMulticastMinChunks, which also take tile 64), 1: mma.sync (8 or
  // state_warps warps), 2: wgmma (sm_90a warpgroup MMA, operands from shared memory; D = 128 at
  // state tiles 32 / 64 with state_warps 0 / 8, elsewhere the mma.sync kernel; docs/perf.md
  // "State kernel on wgmma"). The same bf16 operands, fp32 sums in the tensor core's order.
  // 3, 4: wgmma with a head's state CTAs as one cluster loading their shared inputs once (TMA
  // multicast; two stages at least), a stage refilled once every CTA is done with it, known by
  // a cluster barrier a chunk (3) or by per-stage mbarriers (4); bit-identical to 2 (docs/perf.md
  // "State kernel with cluster multicast").
  int state_mma = 0;
  // true: the workspace already holds this batch's job tables, uploaded by an earlier call on
  // this stream with the same cu_seqlens, slots, slot_stride, heads, head_dim and workspace
  // (pointer and bytes) and every other field here that steers the picks (bf16, precise,
  // output, state_tile, state_mma, state_warps, bf16_workspace, pipeline_blocks: they decide
  // the pipelined split the tables hold); only layer_offset (and the tensors) may differ.
  // Skips the uploads.
  bool tables_uploaded = false;
  // Pipelined schedule (docs/perf.md "Pipelined intra / state schedule"): 2 ..
  // kKdaChunkMaxPipelineBlocks splits every pass that holds one sequence (or one piece of a
  // long one) into that many blocks of whole chunks; the intra kernel runs block after block
  // on the caller's stream while the state pass of block j (waiting on an event for block j's
  // intra) runs on a second, high-priority stream of this thread, then the output pass (if
  // separate) once; the caller's stream waits for the last of them. The state carries from
  // block to block through the slot as between passes, with the same kernels and tables per
  // chunk, so o and the state are bit-identical to the plain schedule. Passes of several
  // sequences take the plain schedule. 1: off; 0: pick (in bf16 mode
  // kKdaChunkBf16PipelineBlocks with the mma.sync state kernel, where it measured faster at every
  // shape: docs/perf.md "Leaner bf16 intra kernel"; with the multicast split pick
  // (kKdaChunkMulticastMinChunks) 4 blocks, 8 from kKdaChunkWgmmaPipelineMinChunks chunks; with
  // the wgmma one otherwise 8 blocks for passes of >= kKdaChunkWgmmaPipelineMinChunks chunks,
  // plain below; off otherwise). It changes the job tables: tables_uploaded needs an earlier call with the
  // same value.
  int pipeline_blocks = 0;
};

inline constexpr int kKdaChunkMaxPipelineBlocks = 64;
// pipeline_blocks' pick in bf16 mode with the mma.sync state kernel (0: plain there too).
inline constexpr int kKdaChunkBf16PipelineBlocks = 4;
// With the wgmma state kernel: 8 blocks for a one-sequence pass of at least this many chunks,
// plain below (T = 16K H32: plain 2.3% faster than 4 blocks; 64K: 8 blocks 3% faster than plain,
// 2.7% than 4; between them unmeasured; docs/perf.md "State kernel on wgmma").
inline constexpr int64_t kKdaChunkWgmmaPipelineMinChunks = 1024;
inline constexpr int kKdaChunkWgmmaPipelineBlocks = 8;
// state_prefetch's pick (chunks ahead; 0: none).
inline constexpr int kKdaChunkStatePrefetch = 0;
// state_mma's pick: 1 mma.sync, 2 wgmma (4, multicast: kKdaChunkMulticastMinChunks below).
inline constexpr int kKdaChunkStateMma = 2;
// bf16 passes of one sequence (D = 128, >= 24 heads) from this many chunks on, with state_tile, state_mma,
// state_warps, pipeline_blocks, bf16_workspace and output all left to the pick, take state tile
// 64 on the multicast wgmma kernel (kKdaChunkMulticastStateMma) and pipelined blocks (4; 8 from
// kKdaChunkWgmmaPipelineMinChunks chunks): at T = 16K H32 1181-1186 us against 1247-1267 for
// tile 32 plain, at 64K 4322 (8 blocks) against 4737-4808 (docs/perf.md "The merged tree on two
// H200s, eighth session"). Shorter or several-sequence passes keep tile 32 (plain).
inline constexpr int64_t kKdaChunkMulticastMinChunks = 128;
inline constexpr int kKdaChunkMulticastStateMma = 4;
// bf16_workspace's pick (docs/perf.md "Packed bf16 workspace").
inline constexpr bool kKdaChunkPackBf16 = true;
// The in-state kernel's warps for KdaChunkArgs::state_warps `asked` at head dim D and state
// tile vt (after the launcher's pick): the launcher's rule, here for the benchmark and tests.
inline int kda_chunk_state_warps(int asked, int64_t D, int vt) { return asked == 16 && D == 128 && vt >= 32 ? 16 : 8; }
// First chunk of block b when `chunks` chunks split into `blocks` near-equal blocks (b == blocks:
// chunks); the pipelined schedule's split, here for its tests.
inline int64_t kda_chunk_pipeline_block_start(int64_t chunks, int64_t blocks, int64_t b) { return chunks * b / blocks; }

// The state kernel kda_chunk_prefill runs for a pass of `seqs` sequences and `chunks` chunks whose
// longest sequence has `serial` chunks (its pick, here for the benchmark too): value rows a CTA,
// the output in a separate pass, the packed bf16 workspace, wgmma, and the multicast form (0 off;
// 1 / 2: state_mma 3 / 4).
struct KdaChunkStatePlan {
  int vt = 32;
  bool separate = false, packed = false, wgmma = false;
  int multicast = 0;
};
KdaChunkStatePlan kda_chunk_plan_state(const KdaChunkArgs& a, int64_t seqs, int64_t chunks, int64_t serial);
// Whether such a pass takes the multicast pick (state tile 64, kKdaChunkMulticastStateMma, pipelined).
bool kda_chunk_multicast_pick(const KdaChunkArgs& a, int64_t seqs, int64_t chunks);

bool kda_chunk_supported(int64_t head_dim);
// kda_chunk_workspace_bytes, kda_chunk_count, kda_chunk_pass_count: kda_chunk_plan.h.
Status kda_chunk_prefill(const KdaChunkArgs& a, cudaStream_t stream);

}  // namespace pdserve::cuda
