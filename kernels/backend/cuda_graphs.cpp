// Decode steps as CUDA graphs. A decode batch (every sequence exactly one new token, no full
// logits, at most kBuckets.back() sequences, block tables within graph_max_pages_) is padded
// to the next bucket and runs over fixed device inputs: token ids, cache entries, context
// lengths, block tables [bucket][graph_max_pages_], KDA slots and logit rows. Padding rows
// read token 0, write no cache entry (entry -1), attend over one position of page 0 and own
// no KDA slot (-1, output zero); their logits are never copied back.
//
// The first step of a bucket runs the body eagerly (sizing every scratch buffer) and then
// captures it; later steps upload the inputs and replay. Nothing inside the body allocates
// or waits on the host (the MoE plan's offsets stay on the device), so the whole step is one
// graph. A scratch buffer that moves (a larger prefill grew it) bumps scratch_generation_,
// which retires every graph: they re-capture on their next use. The split-KV MLA plan
// (mla_decode.h) is rebuilt from the context lengths every step and uploaded into a buffer
// sized for the largest bucket's capacity; the captured launch covers the bucket's capacity.
#include <algorithm>
#include <array>

#include <spdlog/spdlog.h>

#include "backend/cuda_step.h"
#include "common/cuda_check.h"

namespace pdserve::cuda {

namespace {

constexpr std::array<int64_t, 7> kBuckets = {1, 2, 4, 8, 16, 32, 64};

// The fixed input buffers, as offsets into graph_inputs_ (int32 elements).
struct InputLayout {
  int64_t B, max_pages;
  int64_t ids() const { return 0; }
  int64_t entry() const { return B; }
  int64_t ctx() const { return 2 * B; }
  int64_t slots() const { return 3 * B; }
  int64_t rows() const { return 4 * B; }
  int64_t table() const { return 5 * B; }
  int64_t total() const { return 5 * B + B * max_pages; }
};

}  // namespace

int64_t CudaModel::decode_bucket(const ForwardBatch& batch) const {
  if (!opts_.graphs || batch.seqs.empty() || static_cast<int64_t>(batch.seqs.size()) > kBuckets.back()) return 0;
  for (const SequenceInput& seq : batch.seqs)
    if (seq.tokens.size() != 1 || seq.cached_len == 0 || seq.all_logits || static_cast<int64_t>(seq.pages.size()) > graph_max_pages_)
      return 0;
  const int64_t n = static_cast<int64_t>(batch.seqs.size());
  return *std::lower_bound(kBuckets.begin(), kBuckets.end(), n);
}

void CudaModel::drop_graphs() {
  for (DecodeGraph& g : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

Status CudaModel::forward_graph(const ForwardBatch& batch, int64_t B, ForwardOutput* out) {
  const int64_t n = static_cast<int64_t>(batch.seqs.size()), V = cfg_.vocab_size;
  // One layout for every bucket (the largest), so all graphs share graph_inputs_.
  const InputLayout big{kBuckets.back(), graph_max_pages_};
  if (!graph_inputs_) {
    PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&graph_inputs_, big.total() * sizeof(int32_t)), "cudaMalloc (graph inputs)"));
    graph_host_.assign(big.total(), 0);
  }
  const InputLayout L = big;
  Step st;
  st.max_pages = L.max_pages;
  st.entry = graph_inputs_ + L.entry();
  st.ctx_len = graph_inputs_ + L.ctx();
  st.page_table = graph_inputs_ + L.table();
  st.slots = graph_inputs_ + L.slots();
  const int32_t* d_ids = graph_inputs_ + L.ids();
  const int32_t* d_rows = graph_inputs_ + L.rows();
  // Host inputs for B rows, the first n real (none: all padding), uploaded up to the table's end.
  auto fill = [&](int64_t rows, int64_t real) -> Status {
    std::fill(graph_host_.begin(), graph_host_.end(), 0);
    for (int64_t b = 0; b < rows; ++b) {
      graph_host_[L.rows() + b] = static_cast<int32_t>(b);
      if (b >= real) {  // padding
        graph_host_[L.entry() + b] = -1;
        graph_host_[L.ctx() + b] = 1;
        graph_host_[L.slots() + b] = -1;
        continue;
      }
      const SequenceInput& seq = batch.seqs[b];
      const int64_t pos = seq.cached_len;
      graph_host_[L.ids() + b] = seq.tokens[0];
      graph_host_[L.entry() + b] = static_cast<int32_t>(seq.pages[pos / page_size_] * page_size_ + pos % page_size_);
      graph_host_[L.ctx() + b] = static_cast<int32_t>(pos + 1);
      graph_host_[L.slots() + b] = seq.state_slot;
      std::copy(seq.pages.begin(), seq.pages.end(), graph_host_.data() + L.table() + b * L.max_pages);
    }
    const int64_t used = L.table() + rows * L.max_pages;
    PDS_RETURN_IF_ERROR(plan_mla(graph_host_.data() + L.ctx(), rows, /*in_graph=*/true, &st));
    return cuda_status(cudaMemcpyAsync(graph_inputs_, graph_host_.data(), used * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
                       "graph inputs");
  };
  auto rows_of = [&](int64_t rows) {
    st.rows = rows;
    st.row_begin.clear();
    for (int64_t b = 0; b < rows; ++b) st.row_begin.push_back(b);
  };
  if (graphs_.empty()) {
    // Size every scratch buffer for the largest bucket once, with padding rows only (they
    // write no cache entry and touch no slot), so growing buckets do not retire graphs.
    graphs_.resize(kBuckets.size());
    rows_of(L.B);
    PDS_RETURN_IF_ERROR(fill(L.B, 0));
    float* unused = nullptr;
    PDS_RETURN_IF_ERROR(run_body(st, d_ids, d_rows, L.B, &unused));
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "decode graph sizing"));
  }
  rows_of(B);
  PDS_RETURN_IF_ERROR(fill(B, n));
  DecodeGraph& g = graphs_[std::lower_bound(kBuckets.begin(), kBuckets.end(), B) - kBuckets.begin()];
  if (g.exec && g.generation != scratch_generation_) {
    cudaGraphExecDestroy(g.exec);
    g.exec = nullptr;
  }
  float* logits = nullptr;
  if (g.exec) {
    // Same buffers as at capture (the generation matches), so the kLogits pointer is stable.
    PDS_ASSIGN_OR_RETURN(logits, scratch<float>(kLogits, B * V));
    PDS_RETURN_IF_ERROR(cuda_status(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch (decode)"));
    ++graph_replays_;
  } else {
    // This step eagerly (its results are this step's), then capture the same work for the next.
    PDS_RETURN_IF_ERROR(run_body(st, d_ids, d_rows, B, &logits));
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "decode warm-up"));
    const uint64_t generation = scratch_generation_;
    PDS_RETURN_IF_ERROR(cuda_status(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
    float* captured_logits = nullptr;
    Status captured = run_body(st, d_ids, d_rows, B, &captured_logits);
    cudaGraph_t graph = nullptr;
    if (Status end = cuda_status(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture"); captured.is_ok()) captured = end;
    if (captured.is_ok() && (generation != scratch_generation_ || captured_logits != logits))
      captured = internal_error("a scratch buffer moved during capture");
    if (captured.is_ok()) captured = cuda_status(cudaGraphInstantiate(&g.exec, graph, 0), "cudaGraphInstantiate");
    if (graph) cudaGraphDestroy(graph);
    if (captured.is_ok()) {
      g.generation = generation;
      ++graphs_captured_;
    } else {
      // This step's logits are already computed eagerly: serve them, and stay eager from now on.
      spdlog::warn("cuda decode graph (bucket {}) could not be captured, decode steps run eagerly: {}", B, captured.message());
      (void)cudaGetLastError();
      opts_.graphs = false;
    }
  }
  out->vocab = V;
  out->first_row.clear();
  out->num_rows.clear();
  for (int64_t s = 0; s < n; ++s) {
    out->first_row.push_back(s);
    out->num_rows.push_back(1);
  }
  out->logits.resize(n * V);
  PDS_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(out->logits.data(), logits, n * V * sizeof(float), cudaMemcpyDeviceToHost, stream_), "logits"));
  return cuda_status(cudaStreamSynchronize(stream_), "cuda decode step");
}

}  // namespace pdserve::cuda
