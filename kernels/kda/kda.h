// KDA on the device: correct-first per-sequence kernels (prefill conv and norms; the chunked
// tensor-core recurrence is kda_chunk.h, kda_recurrent the fallback for other shapes) and the
// fused decode step (below).
// Contracts = ops/kda.h (same layouts, same maths), for one sequence per call:
//   causal_conv1d_silu: x [T][D] raw, weight [D][K], state [D][K-1] (in/out), out [T][D]
//   kda_gate:           f [T][H*D] -> g (log decay), lower-bound or softplus form
//   l2_normalize:       x <- x * rsqrt(sum x^2 + eps) * scale per row of dim
//   kda_recurrent:      token recurrence over state [H][D][D] laid out [V][K] (in/out)
// The *_step forms are one decode step of B sequences at once (one token each, row b): row
// b's state is at state_base + slots[b] * slot_stride (slots on the device, so a captured
// graph replays with any slots); slots[b] < 0 marks a padding row, whose output is zero.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

Status causal_conv1d_silu(const float* x, int64_t T, int64_t D, const float* weight, int64_t K, float* state, float* out,
                          cudaStream_t stream);
Status kda_gate(const float* f, int64_t T, int64_t H, int64_t D, const float* a_log, const float* dt_bias, bool has_lower_bound,
                float lower_bound, float* g, cudaStream_t stream);
Status l2_normalize(float* x, int64_t rows, int64_t dim, float eps, float scale, cudaStream_t stream);
Status kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t T, int64_t H,
                     int64_t D, float* state, float* o, cudaStream_t stream);
Status causal_conv1d_silu_step(const float* x, int64_t B, int64_t D, const float* weight, int64_t K, float* state_base,
                               const int32_t* slots, int64_t slot_stride, float* out, cudaStream_t stream);
Status kda_recurrent_step(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B, int64_t H,
                          int64_t D, float* state_base, const int32_t* slots, int64_t slot_stride, float* o, cudaStream_t stream);

// ---- Fused decode step (kda_decode_sm90.cu) -------------------------------------------
// One token per sequence, one launch per layer: for row b, head h it does what the CPU layer
// does between the projections and the output projection (src/model/attention_layers.cpp):
//   q,k,v  = silu(causal conv1d step) with the slot's conv state, state shifted by one token
//   q <- q * rsqrt(|q|^2 + 1e-6) * D^-0.5,   k <- k * rsqrt(|k|^2 + 1e-6)
//   decay  = exp(g), g = lb * sigmoid(exp(A_log[h]) * (f + dt_bias))  (or -exp(A_log) softplus(.))
//   beta   = sigmoid(beta_logit)
//   S      = ops::kda_recurrent's step on the slot's [V][K] state, o = S q
//   out    = rms_norm(o) * o_norm * sigmoid(out_gate)
// State: per slot, this layer's block starts at state + slot * slot_stride + layer_offset and
// is the pool layout (include/pdserve/model/cache_pools.h): conv [3][P][K-1] (q, k, v; per
// channel the last K-1 inputs, oldest first) then recurrent [H][V][K] fp32. Unchanged here.
//
// Thread mapping: a block is 4 warps and owns R = 4*RW consecutive rows v of one (row, head)
// state; a warp owns RW rows and streams each 128-column row as 32 lanes x float4 (lane l
// holds columns 4l..4l+3, +128 per further float4 for D = 256; float2 / float for D = 64 / 32):
// every state load and store is a warp-wide contiguous 512 B access, each state float read
// once into registers and written once. Rows are independent in the delta rule, so a head's
// D rows split over D/R blocks; what couples them (the L2 norms of q and k over all channels,
// the RMSNorm over all outputs, the q/k conv state every block reads) decides the plan:
//   kCluster  the head's D/R blocks form one thread-block cluster (at most 16);
//             block r owns channels [rR, rR+R): their conv steps, conv-state shifts and gates
//             run once, and q, k, decays and the norms' partial sums go through distributed
//             shared memory between cluster barriers. Grid (D/R, H, B), cluster (D/R, 1, 1).
//   kTickets  the D/R blocks each redo the per-head preamble from L2; the last to finish (an
//             atomic ticket per head, after a fence) shifts the q/k conv state and applies the
//             norm. Needs `tickets`.
//   kOneBlock one block per head, its warps loop over the rows (next rows prefetched).
//   kPush     (D = 128, K = 4 only; kda_decode_push_sm90.cu) `warps` warps of RW rows a block,
//             D/(warps*RW) blocks a head in one cluster (none when 1): every input loaded
//             before the first store, conv taps unrolled, each block computes its channels'
//             q, k, decays and pushes them (then its rows' outputs) into every peer's shared
//             memory before a cluster barrier; each warp redoes the norms with shuffles.
//   kStream   (D = 128, K = 4 only; kda_decode_stream_sm90.cu) large batches: a block owns a
//             run of whole (row, head) items, `warps` warps of RW rows a pass, and keeps each
//             warp's next rows in flight through a ring of `stages` cp.async shared-memory
//             stages across item boundaries (the next item's inputs prefetched in registers).
// kAuto picks between them by B*H and K (kda_decode_pick; measured choices in docs/perf.md).
//
// Padding rows: slots[b] < 0 makes row b's outputs zero and touches no state (every block of
// the row leaves at once; CUDA-graph buckets pad with such rows).
// Graph-safe: slot ids are read on the device, the launch shape depends only on (B, H, D)
// and `tickets` ([B*H] int32, zero before the first call) is left at zero by every call.
// Requires D in {32, 64, 128, 256}, K in 1..8, slots distinct within the batch, and the state
// pointer, slot_stride and layer_offset 16-byte aligned (floats: multiples of 4).
enum class KdaDecodePlan : int { kAuto, kCluster, kTickets, kOneBlock, kPush, kStream };
struct KdaDecodeShape {
  KdaDecodePlan plan = KdaDecodePlan::kAuto;
  int rows_per_warp = 0;
  int warps = 4;   // warps per block: the push (4, 8 or 16) and stream (4, 8) plans; the others use 4
  int stages = 0;  // the stream plan's ring depth (0: the shape's default)
  int items = 0;   // the stream plan's items a block (0: fewest with every block resident); KdaDecodeArgs::stream_items overrides
};
struct KdaDecodeArgs {
  const float* q_raw = nullptr;       // [B][P] q projection before the conv, P = H*D
  const float* k_raw = nullptr;       // [B][P]
  const float* v_raw = nullptr;       // [B][P]
  const float* f = nullptr;           // [B][P] gate projection (f_b output), before dt_bias
  const float* beta_logit = nullptr;  // [B][H] before the sigmoid
  const float* out_gate = nullptr;    // [B][P] output gate before the sigmoid
  const float* conv_q = nullptr;      // [P][K] depthwise weights, [K-1] on the current token
  const float* conv_k = nullptr;
  const float* conv_v = nullptr;
  const float* a_log = nullptr;       // [H]
  const float* dt_bias = nullptr;     // [P]
  const float* o_norm = nullptr;      // [D] RMSNorm weight
  bool has_lower_bound = true;
  float lower_bound = -5.0f;
  float norm_eps = 1e-6f;
  const int32_t* slots = nullptr;     // [B] state slot of each row (device)
  float* state = nullptr;             // the slot pool
  int64_t slot_stride = 0;            // floats between slots
  int64_t layer_offset = 0;           // floats from a slot's start to this layer's block
  int64_t batch = 0, heads = 0, head_dim = 0, conv_kernel = 4;
  KdaDecodePlan plan = KdaDecodePlan::kAuto;  // kAuto: kda_decode_pick (rows_per_warp ignored)
  int rows_per_warp = 0;              // D = 128: 1, 2, 4, 8, 16 (cluster: 2..16); other D: 2, 8 (D = 256 cluster: 8)
  int warps = 4;                      // push / stream plans: warps per block (4, 8; push: 16 with 8 rows a warp)
  int stages = 0;                     // stream plan: ring depth (0: default)
  int stream_items = 0;               // stream plan: items a block (0: fewest with every block resident)
  int32_t* tickets = nullptr;         // [B*H], zero; only the ticket plan uses it
  // Stream and push plans (ignored by the others): a programmatic dependent launch, so the
  // step's slot and first state reads overlap the drain of the kernel just before it.
  // The kernel waits (griddepcontrol.wait) before reading the projections or writing `out`;
  // the slots, weights and the state must not be written by that kernel.
  bool pdl = false;
  float* out = nullptr;               // [B][P] gated, normalised output (input to the o projection)
};
Status kda_decode_step(const KdaDecodeArgs& a, cudaStream_t stream);
// The plan kda_decode_step uses for kAuto (for benchmarks and logs).
// pdl: the launch will be a programmatic dependent one (KdaDecodeArgs::pdl), which moves the
// large-batch choice (docs/perf.md, "KDA fused decode step on the H200", fourth version).
KdaDecodeShape kda_decode_pick(int64_t batch, int64_t heads, int64_t head_dim, int64_t conv_kernel = 4, bool pdl = false);

}  // namespace pdserve::cuda
