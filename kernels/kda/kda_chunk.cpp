// Host side of the chunked KDA prefill: plans passes that fit the workspace, uploads each
// pass's job tables and launches the intra-chunk and state-passing kernels.
#include "kda/kda_chunk.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "kda/kda_chunk_common.cuh"

namespace pdserve::cuda {
namespace {

using kda_chunk::ChunkJob;
using kda_chunk::SeqJob;

// The state kernel's default buffering of w, qg (docs/perf.md "Chunked KDA prefill").
constexpr bool kKdaChunkStateDoubleBuffer = true;

constexpr size_t align256(size_t n) { return (n + 255) / 256 * 256; }

int64_t chunk_floats(int64_t D) { return 4 * kKdaChunk * D + kKdaChunk * kKdaChunk + D; }

size_t table_bytes(int64_t chunks) { return align256(chunks * sizeof(ChunkJob)) + align256(chunks * sizeof(SeqJob)); }

// Most chunks a pass can hold in `bytes` of workspace.
int64_t pass_capacity(int64_t H, int64_t D, size_t bytes) {
  const size_t per = sizeof(ChunkJob) + sizeof(SeqJob) + static_cast<size_t>(H * chunk_floats(D)) * sizeof(float);
  int64_t n = static_cast<int64_t>(bytes / per);
  while (n > 0 && kda_chunk_workspace_bytes(H, D, n) > bytes) --n;
  return n;
}

}  // namespace

bool kda_chunk_supported(int64_t head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }

size_t kda_chunk_workspace_bytes(int64_t heads, int64_t head_dim, int64_t chunks) {
  return table_bytes(chunks) + static_cast<size_t>(chunks * heads * chunk_floats(head_dim)) * sizeof(float);
}

int64_t kda_chunk_count(const int64_t* cu_seqlens, int64_t num_seqs) {
  int64_t n = 0;
  for (int64_t s = 0; s < num_seqs; ++s) n += (cu_seqlens[s + 1] - cu_seqlens[s] + kKdaChunk - 1) / kKdaChunk;
  return n;
}

Status kda_chunk_prefill(const KdaChunkArgs& a, cudaStream_t stream) {
  const int64_t H = a.heads, D = a.head_dim;
  if (!kda_chunk_supported(D)) return invalid_argument("kda_chunk_prefill: head_dim must be 32, 64 or 128");
  if (a.state_tile != 0 && a.state_tile != 16 && a.state_tile != 32 && a.state_tile != 64)
    return invalid_argument("kda_chunk_prefill: state_tile must be 16, 32 or 64");
  if (a.state_buffers < 0 || a.state_buffers > 2) return invalid_argument("kda_chunk_prefill: state_buffers must be 0, 1 or 2");
  if (H <= 0 || H > 65535 || a.num_seqs < 0) return invalid_argument("kda_chunk_prefill: bad head or sequence count");
  if (a.num_seqs == 0) return Status::ok();
  if (!a.cu_seqlens || !a.slots || !a.workspace) return invalid_argument("kda_chunk_prefill: missing cu_seqlens, slots or workspace");
  if (reinterpret_cast<uintptr_t>(a.workspace) % 256) return invalid_argument("kda_chunk_prefill: workspace must be 256-byte aligned");
  const int64_t capacity = pass_capacity(H, D, a.workspace_bytes);
  if (capacity < 1) return invalid_argument("kda_chunk_prefill: workspace smaller than one chunk");
  for (int64_t s = 0; s < a.num_seqs; ++s)
    if (a.cu_seqlens[s + 1] < a.cu_seqlens[s]) return invalid_argument("kda_chunk_prefill: cu_seqlens must not decrease");

  char* base = static_cast<char*>(a.workspace);
  auto* chunk_table = reinterpret_cast<ChunkJob*>(base);
  auto* seq_table = reinterpret_cast<SeqJob*>(base + align256(capacity * sizeof(ChunkJob)));
  float* inter = reinterpret_cast<float*>(base + table_bytes(capacity));

  std::vector<ChunkJob> chunks;
  std::vector<SeqJob> seqs;
  int64_t s = 0, pos = 0;  // next token: sequence s, offset pos
  while (s < a.num_seqs) {
    chunks.clear();
    seqs.clear();
    // Fill the pass: whole sequences while they fit, the rest of a long one in later passes.
    while (s < a.num_seqs && static_cast<int64_t>(chunks.size()) < capacity) {
      const int64_t len = a.cu_seqlens[s + 1] - a.cu_seqlens[s];
      if (pos >= len) {
        ++s, pos = 0;
        continue;
      }
      const int64_t left = (len - pos + kKdaChunk - 1) / kKdaChunk;
      const int64_t take = std::min(left, capacity - static_cast<int64_t>(chunks.size()));
      SeqJob j{};
      j.row0 = a.cu_seqlens[s] + pos;
      j.rows = std::min(take * kKdaChunk, len - pos);
      j.state_off = static_cast<int64_t>(a.slots[s]) * a.slot_stride + a.layer_offset;
      j.chunk0 = static_cast<int32_t>(chunks.size());
      j.chunks = static_cast<int32_t>(take);
      for (int64_t c = 0; c < take; ++c)
        chunks.push_back(ChunkJob{j.row0 + c * kKdaChunk, static_cast<int32_t>(std::min<int64_t>(kKdaChunk, j.rows - c * kKdaChunk)), 0});
      seqs.push_back(j);
      pos += j.rows;
    }
    if (chunks.empty()) break;
    if (seqs.size() > 65535) return invalid_argument("kda_chunk_prefill: at most 65535 sequences a pass");
    // Pageable sources: the copies return once the host buffers are staged, so reusing them
    // in the next pass is safe; stream order keeps the device tables valid for the kernels.
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(chunk_table, chunks.data(), chunks.size() * sizeof(ChunkJob), cudaMemcpyHostToDevice, stream),
                                    "kda_chunk_prefill: chunk table"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(seq_table, seqs.data(), seqs.size() * sizeof(SeqJob), cudaMemcpyHostToDevice, stream),
                                    "kda_chunk_prefill: sequence table"));
    PDS_RETURN_IF_ERROR(cuda_status(kda_chunk_intra_launch(static_cast<int>(D), a.precise, a.q, a.k, a.v, a.g, a.beta, H, chunk_table,
                                                           static_cast<int64_t>(chunks.size()), inter, stream),
                                    "kda_chunk_intra"));
    // Narrow state slices when wide ones would leave most SMs idle.
    int vt = a.state_tile;
    if (vt == 0) vt = (D / 32) * H * static_cast<int64_t>(seqs.size()) >= 96 ? 32 : 16;
    if (D == 32) vt = 32;  // 16 leaves too few state tiles for the block's 8 warps; 64 > D
    if (vt > D) vt = static_cast<int>(D);
    const bool double_buffer = a.state_buffers == 0 ? kKdaChunkStateDoubleBuffer : a.state_buffers == 2;
    PDS_RETURN_IF_ERROR(cuda_status(kda_chunk_state_launch(static_cast<int>(D), vt, a.precise, double_buffer, inter, H, seq_table,
                                                           static_cast<int64_t>(seqs.size()), a.state, a.o, stream),
                                    "kda_chunk_state"));
  }
  return Status::ok();
}

}  // namespace pdserve::cuda
