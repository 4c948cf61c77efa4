// Host-only sizing of the chunked KDA prefill (kda_chunk.h), free of CUDA so the CPU tests
// cover it: the workspace a pass needs, how many passes a workspace splits a batch into (the
// launcher's own rule, kda_chunk.cpp), and the backend's workspace policy for a prefill step
// (kernels/backend/cuda_layers.cpp). tests/ops/kda_chunk_plan_test.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace pdserve::cuda {

inline constexpr int kKdaChunk = 64;  // tokens per chunk (the UT block)

// Bytes of the launcher's job entries (kda_chunk_common.cuh ChunkJob, SeqJob; kda_chunk.cpp
// static_asserts them).
inline constexpr size_t kKdaChunkJobBytes = 16;
inline constexpr size_t kKdaSeqJobBytes = 32;

inline constexpr size_t kda_chunk_align256(size_t n) { return (n + 255) / 256 * 256; }
// fp32 intermediates of one (chunk, head): w, u, qg, kg [C][D], Aqk [C][C], exp(G_last) [D], the state [D][D].
inline constexpr int64_t kda_chunk_floats(int64_t D) { return 4 * kKdaChunk * D + kKdaChunk * kKdaChunk + D + D * D; }
// Tables of `chunks` chunks: one ChunkJob each and at most one SeqJob each.
inline constexpr size_t kda_chunk_table_bytes(int64_t chunks) {
  return kda_chunk_align256(static_cast<size_t>(chunks) * kKdaChunkJobBytes) + kda_chunk_align256(static_cast<size_t>(chunks) * kKdaSeqJobBytes);
}
// Bytes of workspace that let one pass cover `chunks` chunks of all heads (a call with less
// splits the batch into passes; the state carries between them through the slots). The same
// in every precision mode (the packed bf16 workspace uses part of the fp32 layout).
inline constexpr size_t kda_chunk_workspace_bytes(int64_t heads, int64_t head_dim, int64_t chunks) {
  return kda_chunk_table_bytes(chunks) + static_cast<size_t>(chunks * heads * kda_chunk_floats(head_dim)) * sizeof(float);
}
// Chunks of kKdaChunk tokens in the batch (what a single pass needs).
inline int64_t kda_chunk_count(const int64_t* cu_seqlens, int64_t num_seqs) {
  int64_t n = 0;
  for (int64_t s = 0; s < num_seqs; ++s) n += (cu_seqlens[s + 1] - cu_seqlens[s] + kKdaChunk - 1) / kKdaChunk;
  return n;
}
// Chunks one pass holds in `workspace_bytes` when the batch has `total` chunks (every pass's
// tables sit at the workspace's front); 0: not even one.
inline int64_t kda_chunk_pass_capacity(int64_t heads, int64_t head_dim, int64_t total, size_t workspace_bytes) {
  const size_t tables = kda_chunk_table_bytes(total);
  const size_t per_chunk = static_cast<size_t>(heads * kda_chunk_floats(head_dim)) * sizeof(float);
  return workspace_bytes > tables ? static_cast<int64_t>((workspace_bytes - tables) / per_chunk) : 0;
}
// Passes the launcher splits `total` chunks into (it fills each pass to capacity, cutting a
// long sequence where the pass ends); 0 where the workspace holds no chunk.
inline int64_t kda_chunk_pass_count(int64_t heads, int64_t head_dim, int64_t total, size_t workspace_bytes) {
  const int64_t cap = kda_chunk_pass_capacity(heads, head_dim, total, workspace_bytes);
  return cap < 1 ? 0 : (total + cap - 1) / cap;
}

// The CUDA backend's workspace for a prefill step. Without a known step size it caps one
// pass at kKdaPrefillWorkspaceFloor (the old fixed cap); with the step's token budget and
// sequence limit it raises the cap to one pass of the largest batch a step can bring, so
// such a step is one pass and the launcher's one-pass picks (multicast, pipelined) apply.
inline constexpr size_t kKdaPrefillWorkspaceFloor = size_t{512} << 20;
// Most chunks a step of `tokens` rows in at most `seqs` sequences can hold: sum of
// ceil(l_i / 64) <= (tokens + 63 * seqs) / 64 (8192 tokens: 128 in one sequence, 131 in 4, 143 in 16).
inline int64_t kda_prefill_max_chunks(int64_t tokens, int64_t seqs) {
  if (tokens < 1) return 0;
  seqs = std::clamp<int64_t>(seqs, 1, tokens);
  return (tokens + (kKdaChunk - 1) * seqs) / kKdaChunk;
}
// The cap: the floor, or one pass of the step's largest batch where that is more.
inline size_t kda_prefill_workspace_cap(int64_t heads, int64_t head_dim, int64_t step_tokens, int64_t step_seqs) {
  return std::max(kKdaPrefillWorkspaceFloor, kda_chunk_workspace_bytes(heads, head_dim, kda_prefill_max_chunks(step_tokens, step_seqs)));
}
// Bytes the backend asks for a batch of `chunks` chunks: one pass up to the cap, never less
// than one chunk's (the launcher's minimum).
inline size_t kda_prefill_workspace_bytes(int64_t heads, int64_t head_dim, int64_t chunks, size_t cap) {
  return std::max(kda_chunk_workspace_bytes(heads, head_dim, 1), std::min(cap, kda_chunk_workspace_bytes(heads, head_dim, chunks)));
}

}  // namespace pdserve::cuda
