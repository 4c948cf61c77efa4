// Host side of the chunked KDA prefill: plans passes that fit the workspace, uploads each
// pass's job tables once (every pass's at the workspace's front) and launches the intra-chunk,
// state-passing and (output in its own pass) output kernels.
#include "kda/kda_chunk.h"

#include <algorithm>
#include <map>
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
// The output in its own pass shortens the serial kernel by ~2 us a chunk (3xTF32, D = 128)
// and costs ~68 ns per chunk and head in the parallel pass, so it pays where heads x chunks
// over the serial chunk count is below ~29: one long sequence at the TP4 rank's 24 heads
// (-11% at 8K tokens) but not at 32 heads (+1.4% at 16K). Plain tf32 saves too little a chunk
// (0.9 us) to pay at these head counts; D < 128 is unmeasured. docs/perf.md "Output out of
// the serial pass".
constexpr int64_t kKdaChunkSeparateMaxWidth = 28;
bool separate_output_pays(bool precise, int64_t D, int64_t H, int64_t pass_chunks, int64_t serial_chunks) {
  return precise && D == 128 && H * pass_chunks < kKdaChunkSeparateMaxWidth * serial_chunks;
}

// kda_chunk_plan.h sizes the tables (every sequence piece of a pass has at least one chunk: one
// SeqJob a chunk at most).
static_assert(sizeof(ChunkJob) == kKdaChunkJobBytes && sizeof(SeqJob) == kKdaSeqJobBytes, "kda_chunk_plan.h sizes the tables");

// One pass: its slices of the tables (pass-local chunk indices in SeqJob::chunk0).
struct Pass {
  int64_t chunk0, chunks, seq0, seqs;
  int64_t serial;  // chunks of its longest sequence: the state kernel's serial steps
  int64_t blocks;  // > 1: pipelined, its table holds one SeqJob a block (seqs == 1)
};

// The pipelined schedule's second stream (high priority: the serial state pass takes SMs
// before the intra blocks queued beside it) and its events, one set per thread and device
// (events are re-recorded per call: sharing them across threads would race), kept for the
// process's life.
struct PipelineStreams {
  cudaStream_t state = nullptr;
  cudaEvent_t fork = nullptr, ready = nullptr, join = nullptr;
};

Status pipeline_streams(PipelineStreams*& out) {
  thread_local std::map<int, PipelineStreams> per_device;
  int dev = 0;
  PDS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "kda_chunk_prefill: device"));
  PipelineStreams& ps = per_device[dev];
  if (!ps.join) {
    int least = 0, greatest = 0;
    PDS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetStreamPriorityRange(&least, &greatest), "kda_chunk_prefill: stream priorities"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithPriority(&ps.state, cudaStreamNonBlocking, greatest), "kda_chunk_prefill: state stream"));
    for (cudaEvent_t* e : {&ps.fork, &ps.ready, &ps.join})
      PDS_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "kda_chunk_prefill: pipeline event"));
  }
  out = &ps;
  return Status::ok();
}

}  // namespace

bool kda_chunk_supported(int64_t head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }

// A long one-sequence bf16 pass with every state choice left to the pick: state tile 64 in
// multicast clusters (state_mma 4), pipelined, so the state pass holds half the SMs and the
// intra kernel the rest (docs/perf.md "The merged tree on two H200s, eighth session").
// Only where tile 32 would have been picked (>= 96 tiles of 32 value rows: H >= 24 at D = 128,
// the measured head counts); fewer heads keep the narrow tiles that spread the state pass.
bool kda_chunk_multicast_pick(const KdaChunkArgs& a, int64_t seqs, int64_t chunks) {
  const int64_t D = a.head_dim, H = a.heads;
  return a.bf16 && D == 128 && seqs == 1 && (D / 32) * H >= 96 && chunks >= kKdaChunkMulticastMinChunks && a.state_tile == 0 &&
         a.state_mma == 0 && a.state_warps == 0 && a.pipeline_blocks == 0 && a.bf16_workspace != 1 && a.output == KdaChunkOutput::kPick;
}

KdaChunkStatePlan kda_chunk_plan_state(const KdaChunkArgs& a, int64_t seqs, int64_t chunks, int64_t serial) {
  const int64_t D = a.head_dim, H = a.heads;
  const kda_chunk::Math math = a.bf16 ? kda_chunk::kBf16 : a.precise ? kda_chunk::k3xTf32 : kda_chunk::kTf32;
  KdaChunkStatePlan sp;
  const bool multicast = kda_chunk_multicast_pick(a, seqs, chunks);
  // Narrow state slices when wide ones would leave most SMs idle.
  sp.vt = multicast ? 64 : a.state_tile;
  if (sp.vt == 0) sp.vt = (D / 32) * H * seqs >= 96 ? 32 : 16;
  if (D == 32) sp.vt = 32;  // 16 leaves too few state tiles for the block's 8 warps; 64 > D
  if (sp.vt > D) sp.vt = static_cast<int>(D);
  sp.separate = a.output == KdaChunkOutput::kPick ? separate_output_pays(math == kda_chunk::k3xTf32, D, H, chunks, serial)
                                                  : a.output == KdaChunkOutput::kSeparate;
  sp.packed = math == kda_chunk::kBf16 && !sp.separate && (a.bf16_workspace == 0 ? kKdaChunkPackBf16 : a.bf16_workspace == 2);
  const int mma = multicast ? kKdaChunkMulticastStateMma : a.state_mma == 0 ? kKdaChunkStateMma : a.state_mma;
  sp.wgmma = sp.packed && a.state_warps != 16 && mma >= 2 && kda_chunk_state_wgmma_supported(static_cast<int>(D), sp.vt);
  sp.multicast = sp.wgmma && mma >= 3 ? mma - 2 : 0;
  return sp;
}

Status kda_chunk_prefill(const KdaChunkArgs& a, cudaStream_t stream) {
  const int64_t H = a.heads, D = a.head_dim;
  if (!kda_chunk_supported(D)) return invalid_argument("kda_chunk_prefill: head_dim must be 32, 64 or 128");
  if (a.state_tile != 0 && a.state_tile != 16 && a.state_tile != 32 && a.state_tile != 64)
    return invalid_argument("kda_chunk_prefill: state_tile must be 16, 32 or 64");
  if (a.state_buffers < 0 || a.state_buffers > 3) return invalid_argument("kda_chunk_prefill: state_buffers must be 0 .. 3");
  if (a.state_warps != 0 && a.state_warps != 8 && a.state_warps != 16) return invalid_argument("kda_chunk_prefill: state_warps must be 0, 8 or 16");
  if (a.output != KdaChunkOutput::kPick && a.output != KdaChunkOutput::kInState && a.output != KdaChunkOutput::kSeparate)
    return invalid_argument("kda_chunk_prefill: bad output mode");
  if (a.bf16_workspace < 0 || a.bf16_workspace > 2) return invalid_argument("kda_chunk_prefill: bf16_workspace must be 0, 1 or 2");
  if (a.bf16_intra < 0 || a.bf16_intra > 2) return invalid_argument("kda_chunk_prefill: bf16_intra must be 0, 1 or 2");
  if (a.state_prefetch < -1 || a.state_prefetch > 8) return invalid_argument("kda_chunk_prefill: state_prefetch must be -1 .. 8");
  if (a.state_mma < 0 || a.state_mma > 4) return invalid_argument("kda_chunk_prefill: state_mma must be 0 .. 4");
  if (a.pipeline_blocks < 0 || a.pipeline_blocks > kKdaChunkMaxPipelineBlocks)
    return invalid_argument("kda_chunk_prefill: pipeline_blocks must be 0 .. 64");
  if (H <= 0 || H > 65535 || a.num_seqs < 0) return invalid_argument("kda_chunk_prefill: bad head or sequence count");
  if (a.num_seqs == 0) return Status::ok();
  if (!a.cu_seqlens || !a.slots || !a.workspace) return invalid_argument("kda_chunk_prefill: missing cu_seqlens, slots or workspace");
  if (reinterpret_cast<uintptr_t>(a.workspace) % 256) return invalid_argument("kda_chunk_prefill: workspace must be 256-byte aligned");
  for (int64_t s = 0; s < a.num_seqs; ++s)
    if (a.cu_seqlens[s + 1] < a.cu_seqlens[s]) return invalid_argument("kda_chunk_prefill: cu_seqlens must not decrease");
  const int64_t total = kda_chunk_count(a.cu_seqlens, a.num_seqs);
  if (total == 0) return Status::ok();
  // Every pass's tables at the workspace's front (uploaded once, reusable by later layers),
  // the per-chunk intermediates of one pass after them.
  const size_t tables = kda_chunk_table_bytes(total);
  const int64_t capacity = kda_chunk_pass_capacity(H, D, total, a.workspace_bytes);  // kda_chunk_pass_count's rule
  if (capacity < 1) return invalid_argument("kda_chunk_prefill: workspace smaller than the tables and one chunk");

  char* base = static_cast<char*>(a.workspace);
  auto* chunk_table = reinterpret_cast<ChunkJob*>(base);
  auto* seq_table = reinterpret_cast<SeqJob*>(base + kda_chunk_align256(total * sizeof(ChunkJob)));
  float* inter = reinterpret_cast<float*>(base + tables);

  // Plan every pass on the host (cheap; the same plan for every layer of a step).
  std::vector<ChunkJob> chunks;
  std::vector<SeqJob> seqs;
  std::vector<Pass> passes;
  chunks.reserve(static_cast<size_t>(total));
  int64_t s = 0, pos = 0;  // next token: sequence s, offset pos
  while (s < a.num_seqs) {
    Pass p{static_cast<int64_t>(chunks.size()), 0, static_cast<int64_t>(seqs.size()), 0, 0, 1};
    // Fill the pass: whole sequences while they fit, the rest of a long one in later passes.
    while (s < a.num_seqs && p.chunks < capacity) {
      const int64_t len = a.cu_seqlens[s + 1] - a.cu_seqlens[s];
      if (pos >= len) {
        ++s, pos = 0;
        continue;
      }
      const int64_t left = (len - pos + kKdaChunk - 1) / kKdaChunk;
      const int64_t take = std::min(left, capacity - p.chunks);
      SeqJob j{};
      j.row0 = a.cu_seqlens[s] + pos;
      j.rows = std::min(take * kKdaChunk, len - pos);
      j.slot_off = static_cast<int64_t>(a.slots[s]) * a.slot_stride;
      j.chunk0 = static_cast<int32_t>(p.chunks);
      j.chunks = static_cast<int32_t>(take);
      for (int64_t c = 0; c < take; ++c)
        chunks.push_back(ChunkJob{j.row0 + c * kKdaChunk, static_cast<int32_t>(std::min<int64_t>(kKdaChunk, j.rows - c * kKdaChunk)), 0});
      seqs.push_back(j);
      p.chunks += take;
      p.serial = std::max(p.serial, take);
      ++p.seqs;
      pos += j.rows;
    }
    if (p.chunks == 0) break;
    if (p.seqs > 65535) return invalid_argument("kda_chunk_prefill: at most 65535 sequences a pass");
    passes.push_back(p);
  }
  const kda_chunk::Math math = a.bf16 ? kda_chunk::kBf16 : a.precise ? kda_chunk::k3xTf32 : kda_chunk::kTf32;
  auto multicast_pick = [&](const Pass& p) { return kda_chunk_multicast_pick(a, p.seqs, p.chunks); };
  auto plan_state = [&](const Pass& p) { return kda_chunk_plan_state(a, p.seqs, p.chunks, p.serial); };
  // Pipelined blocks of a one-sequence pass: as asked, else bf16's pick - the multicast pick
  // 4 blocks, 8 from kKdaChunkWgmmaPipelineMinChunks chunks; with the wgmma state kernel 8
  // blocks from kKdaChunkWgmmaPipelineMinChunks chunks on and plain below, else 4.
  auto blocks_for = [&](const Pass& p) -> int64_t {
    if (a.pipeline_blocks != 0) return a.pipeline_blocks;
    if (!a.bf16) return 1;
    if (multicast_pick(p)) return p.chunks >= kKdaChunkWgmmaPipelineMinChunks ? kKdaChunkWgmmaPipelineBlocks : kKdaChunkBf16PipelineBlocks;
    if (!plan_state(p).wgmma) return kKdaChunkBf16PipelineBlocks;
    return p.chunks >= kKdaChunkWgmmaPipelineMinChunks ? kKdaChunkWgmmaPipelineBlocks : 1;
  };
  if (a.pipeline_blocks >= 2 || (a.pipeline_blocks == 0 && a.bf16)) {
    // A one-sequence pass's SeqJob becomes one per block (pass-local chunk0 as before). Every
    // block has >= 1 chunk, so the table still holds at most one SeqJob a chunk.
    std::vector<SeqJob> split;
    split.reserve(static_cast<size_t>(total));
    for (Pass& p : passes) {
      const int64_t first = static_cast<int64_t>(split.size());
      const int64_t want = p.seqs == 1 ? blocks_for(p) : 1;
      if (p.seqs == 1 && p.chunks >= 2 && want >= 2) {
        const SeqJob j = seqs[static_cast<size_t>(p.seq0)];
        p.blocks = std::min<int64_t>(want, p.chunks);
        for (int64_t b = 0; b < p.blocks; ++b) {
          const int64_t c0 = kda_chunk_pipeline_block_start(p.chunks, p.blocks, b), c1 = kda_chunk_pipeline_block_start(p.chunks, p.blocks, b + 1);
          SeqJob bj = j;
          bj.row0 = j.row0 + c0 * kKdaChunk;
          bj.rows = std::min(j.rows, c1 * kKdaChunk) - c0 * kKdaChunk;
          bj.chunk0 = static_cast<int32_t>(j.chunk0 + c0);
          bj.chunks = static_cast<int32_t>(c1 - c0);
          split.push_back(bj);
        }
      } else {
        split.insert(split.end(), seqs.begin() + p.seq0, seqs.begin() + p.seq0 + p.seqs);
      }
      p.seq0 = first;
    }
    seqs = std::move(split);
  }
  if (!a.tables_uploaded) {
    // Pageable sources: the copies return once the host buffers are staged; stream order
    // keeps the device tables valid for the kernels (and for later calls that reuse them).
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(chunk_table, chunks.data(), chunks.size() * sizeof(ChunkJob), cudaMemcpyHostToDevice, stream),
                                    "kda_chunk_prefill: chunk table"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(seq_table, seqs.data(), seqs.size() * sizeof(SeqJob), cudaMemcpyHostToDevice, stream),
                                    "kda_chunk_prefill: sequence table"));
  }
  const int prefetch = a.state_prefetch == 0 ? kKdaChunkStatePrefetch : std::max(a.state_prefetch, 0);
  for (const Pass& p : passes) {
    const ChunkJob* cj = chunk_table + p.chunk0;
    const SeqJob* sj = seq_table + p.seq0;
    const KdaChunkStatePlan sp = plan_state(p);
    const int vt = sp.vt;
    const bool separate = sp.separate, packed = sp.packed, wgmma = sp.wgmma;
    const int warps = kda_chunk_state_warps(a.state_warps, D, vt);
    // Picked buffering: two, except the packed state kernel pipelined: single-buffered (83.5 KB
    // at D = 128) it leaves room for an intra CTA on its SM, which paid 4-8% over two buffers
    // pipelined; plain, one and two buffers were within 1.5% (docs/perf.md "Packed bf16 workspace").
    const bool double_buffer = a.state_buffers == 0 ? kKdaChunkStateDoubleBuffer && !(packed && p.blocks > 1) : a.state_buffers >= 2;
    // The wgmma kernel's stages of a chunk's inputs: as the buffering above, or 3 where asked
    // (tile 32; 2 at 64).
    const int stages = a.state_buffers == 3 ? 3 : double_buffer ? 2 : 1;
    auto intra = [&](int64_t c0, int64_t n, cudaStream_t s) {
      return cuda_status(kda_chunk_intra_launch(static_cast<int>(D), math, a.q, a.k, a.v, a.g, a.beta, H, cj + c0, n,
                                                inter + c0 * H * kda_chunk_floats(D), s, packed, a.bf16_intra == 2),
                         "kda_chunk_intra");
    };
    auto state = [&](const SeqJob* jobs, int64_t n, cudaStream_t s) {
      if (separate)
        return cuda_status(kda_chunk_state_split_launch(static_cast<int>(D), vt, math, double_buffer, inter, H, jobs, n, a.state, a.layer_offset, s),
                           "kda_chunk_state (separate output)");
      if (wgmma)
        return cuda_status(kda_chunk_state_wgmma_launch(static_cast<int>(D), vt, stages, inter, H, jobs, n, a.state, a.layer_offset, a.o, s, prefetch,
                                                        sp.multicast, p.chunks),
                           "kda_chunk_state (wgmma)");
      return cuda_status(kda_chunk_state_launch(static_cast<int>(D), vt, warps, math, double_buffer, inter, H, jobs, n, a.state, a.layer_offset, a.o, s, packed,
                                                prefetch),
                         "kda_chunk_state");
    };
    auto output = [&](cudaStream_t s) {
      return cuda_status(kda_chunk_output_launch(static_cast<int>(D), math, inter, H, cj, p.chunks, a.o, s), "kda_chunk_output");
    };
    if (p.blocks == 1) {
      PDS_RETURN_IF_ERROR(intra(0, p.chunks, stream));
      PDS_RETURN_IF_ERROR(state(sj, p.seqs, stream));
      if (separate) PDS_RETURN_IF_ERROR(output(stream));
      continue;
    }
    // Pipelined: intra blocks back to back on the caller's stream; block j's state pass on the
    // state stream once its intra block is done; the caller's stream waits for the last (which
    // also keeps the next pass's intra from overwriting this pass's workspace early).
    PipelineStreams* ps = nullptr;
    PDS_RETURN_IF_ERROR(pipeline_streams(ps));
    PDS_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ps->fork, stream), "kda_chunk_prefill: fork"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(ps->state, ps->fork, 0), "kda_chunk_prefill: fork"));
    for (int64_t b = 0; b < p.blocks; ++b) {
      const SeqJob& bj = seqs[static_cast<size_t>(p.seq0 + b)];
      PDS_RETURN_IF_ERROR(intra(bj.chunk0, bj.chunks, stream));
      PDS_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ps->ready, stream), "kda_chunk_prefill: block ready"));
      PDS_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(ps->state, ps->ready, 0), "kda_chunk_prefill: block ready"));
      PDS_RETURN_IF_ERROR(state(sj + b, 1, ps->state));
    }
    if (separate) PDS_RETURN_IF_ERROR(output(ps->state));
    PDS_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ps->join, ps->state), "kda_chunk_prefill: join"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(stream, ps->join, 0), "kda_chunk_prefill: join"));
  }
  return Status::ok();
}

}  // namespace pdserve::cuda
