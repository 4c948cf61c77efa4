// CudaModel: construction, batch checks, pools and the layer loop (the layers themselves are
// in cuda_layers.cpp). Follows Model::forward (src/model/model.cpp) step by step.
#include "backend/cuda_model.h"

#include <algorithm>
#include <set>

#include "attn_res/attn_res.h"
#include "backend/cuda_step.h"
#include "common/cuda_check.h"
#include "gemm/gemm.h"
#include "glue/glue.h"
#include "norm/norm.h"

namespace pdserve::cuda {

Result<std::unique_ptr<CudaModel>> CudaModel::create(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                     int64_t num_slots, CudaForwardOptions opts) {
  return create(std::move(model), num_pages, page_size, num_slots, 0, nullptr, opts);
}

Result<std::unique_ptr<CudaModel>> CudaModel::create(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                     int64_t num_slots, int device, std::unique_ptr<DeviceCommunicator> comm,
                                                     CudaForwardOptions opts) {
  if (!model) return invalid_argument("cuda backend: no model");
  const ShardSpec shard = model->shard();
  if (shard.size > 1 && (!comm || comm->size() != shard.size || comm->rank() != shard.rank || comm->device() != device))
    return invalid_argument("cuda backend: a tensor-parallel shard needs a device communicator of its rank, size and device");
  if (num_pages < 1 || page_size < 1 || num_slots < 1) return invalid_argument("cuda backend: pool sizes must be positive");
  std::unique_ptr<CudaModel> m(new CudaModel());
  m->model_ = std::move(model);
  m->cfg_ = m->model_->config();
  m->device_ = device;
  if (shard.size > 1) m->comm_ = std::move(comm);
  const ModelConfig& c = m->cfg_;
  if (c.num_kda_layers() > 0 && c.kda_head_dim > 256) return unsupported("cuda backend: kda head_dim must be at most 256");
  PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  PDS_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  // A pipeline stage uploads and pools only its own layers (the Model read only those).
  PDS_ASSIGN_OR_RETURN(m->w_, DeviceWeights::upload(c, m->model_->weights(), m->model_->layers(), opts.e4m3_moe_decode));
  m->mla_layers_ = m->model_->stage_mla_layers();
  m->kda_layers_ = m->model_->stage_kda_layers();
  m->num_pages_ = num_pages;
  m->page_size_ = page_size;
  m->num_slots_ = num_slots;
  m->kv_layer_stride_ = num_pages * page_size * c.mla_cache_dim();
  if (opts.kv_cache_dtype != DType::kF32 && opts.kv_cache_dtype != DType::kBF16)
    return invalid_argument("cuda backend: kv_cache_dtype must be float32 or bfloat16");
  m->kv_dtype_ = opts.kv_cache_dtype;
  // The split-KV decode on bf16 pages takes the lean forms only (mla_decode.h, "A bf16 cache"):
  // K3's widths (latent 512 + key 64), <= 3 heads a rank, pages a multiple of 16 tokens. Other
  // shapes (the tiny presets but tiny-k3-mla512, or odd page sizes) run mla_attend_latent,
  // which reads bf16 pages at any shape; describe() says which.
  const int64_t rank_heads = c.num_heads / shard.size;
  m->split_kv_bf16_ok_ = m->kv_dtype_ == DType::kBF16 && opts.split_kv_mla &&
                         mla_decode_bf16_supported(rank_heads, c.kv_lora_rank, c.qk_rope_head_dim, page_size);
  const int64_t P = c.kda_proj_dim() / shard.size;  // a rank's KDA state holds its heads only
  m->kda_conv_floats_ = 3 * P * (c.conv_kernel - 1);
  m->kda_layer_floats_ = m->kda_conv_floats_ + c.kda_num_heads / shard.size * c.kda_head_dim * c.kda_head_dim;
  m->slot_floats_ = m->kda_layers_ * m->kda_layer_floats_;
  // Pools start zeroed: never-written pages read as zeros, as on the CPU.
  // (bf16 zero bits are +0.0 too.)
  if (m->kv_elems() > 0) {
    const size_t kv_bytes = static_cast<size_t>(m->kv_elems() * m->kv_elem_bytes());
    PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&m->kv_, kv_bytes), "cudaMalloc (MLA pages)"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemset(m->kv_, 0, kv_bytes), "cudaMemset"));
  }
  if (m->state_floats() > 0) {
    PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&m->state_, m->state_floats() * sizeof(float)), "cudaMalloc (KDA state)"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemset(m->state_, 0, m->state_floats() * sizeof(float)), "cudaMemset"));
  }
  // The fused MoE decode kernel's queue (moe_decode.h): one per model, so models sharing a
  // GPU (prefill and decode roles in one process) never share it; this model's MoE layers
  // run in order on stream_, so they can. Zero once here; every call leaves it zero.
  int64_t most_local = 0;
  for (const DeviceLayer& l : m->w_.layers) most_local = std::max(most_local, l.local_experts);
  if (most_local > 0) {
    m->moe_queue_.bytes = moe_decode_workspace_bytes(most_local);
    PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&m->moe_queue_.data, m->moe_queue_.bytes), "cudaMalloc (MoE decode queue)"));
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemset(m->moe_queue_.data, 0, m->moe_queue_.bytes), "cudaMemset"));
  }
  m->device_bytes_ = m->w_.bytes() + m->kv_elems() * m->kv_elem_bytes() + m->state_floats() * sizeof(float);
  m->opts_ = opts;
  if (m->comm_) m->opts_.graphs = false;  // NCCL inside captured decode graphs: not tested yet
  m->graph_max_pages_ = opts.graph_max_pages > 0 ? std::min(opts.graph_max_pages, num_pages) : num_pages;
  return m;
}

CudaModel::~CudaModel() {
  cudaSetDevice(device_);  // the buffers and stream belong to this rank's device
  if (stream_) cudaStreamSynchronize(stream_);
  drop_graphs();
  if (graph_inputs_) cudaFree(graph_inputs_);
  for (auto& [p, n] : scratch_) cudaFree(p);
  if (kv_) cudaFree(kv_);
  if (state_) cudaFree(state_);
  if (moe_queue_.data) cudaFree(moe_queue_.data);
  if (stream_) cudaStreamDestroy(stream_);
}

int64_t CudaModel::kv_elems() const { return mla_layers_ * kv_layer_stride_; }

float* CudaModel::kv_layer_f32(int64_t pool_layer) const {
  return kv_dtype_ == DType::kF32 ? static_cast<float*>(kv_) + pool_layer * kv_layer_stride_ : nullptr;
}

uint16_t* CudaModel::kv_layer_bf16(int64_t pool_layer) const {
  return kv_dtype_ == DType::kBF16 ? static_cast<uint16_t*>(kv_) + pool_layer * kv_layer_stride_ : nullptr;
}
int64_t CudaModel::state_floats() const { return num_slots_ * slot_floats_; }

std::string CudaModel::describe() const {
  cudaDeviceProp p{};
  std::string name = cudaGetDeviceProperties(&p, device_) == cudaSuccess ? p.name : "unknown GPU";
  if (comm_) name += ", device " + std::to_string(device_) + ", tp rank " + std::to_string(comm_->rank()) + " of " + std::to_string(comm_->size());
  if (stage_link_)
    name += ", device " + std::to_string(device_) + ", pipeline stage " + std::to_string(stage_link_->rank()) + " of " +
            std::to_string(stage_link_->size()) + " (layers " + std::to_string(model_->layers().begin) + ".." +
            std::to_string(model_->layers().end - 1) + ")";
  std::string cache = "fp32 MLA cache";
  if (kv_dtype_ == DType::kBF16)
    cache = std::string("bf16 MLA cache, decode attention ") +
            (split_kv_bf16_ok_ ? "split-KV on tensor cores" : "mla_attend_latent (the split-KV bf16 forms take K3's widths at <= 3 heads a rank, pages a multiple of 16 tokens)");
  // Which bit shuffle the decode-layout MoE layers hold (DeviceWeights::upload, moe_decode_bits_for).
  int64_t decode_moe = 0, e4m3_moe = 0;
  for (const DeviceLayer& l : w_.layers)
    if (l.is_moe && l.decode_layout) ++decode_moe, e4m3_moe += l.mxfp4_decode.w1.bits == Mxfp4DecodeBits::kFp8;
  if (decode_moe > 0)
    cache += ", MoE experts on " + (e4m3_moe == decode_moe ? std::string("E4M3") : e4m3_moe == 0 ? std::string("bf16") : "mixed E4M3/bf16") +
             " tensor cores (" + std::to_string(decode_moe) + " decode-layout layers)";
  return "cuda (" + name + ", fp32 correct-first kernels, " + cache + ", decode " + (opts_.graphs ? "CUDA graphs" : "eager") + ", " +
         std::to_string(device_bytes_ >> 20) + " MiB of weights and pools, " +
         std::to_string(num_pages_) + " pages of " + std::to_string(page_size_) + ", " + std::to_string(num_slots_) + " slots)";
}

template <typename T>
Result<T*> CudaModel::scratch(int slot, size_t n) {
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(slot + 1, {nullptr, 0});
  auto& [p, bytes] = scratch_[slot];
  const size_t need = std::max<size_t>(n, 1) * sizeof(T);
  if (bytes < need) {
    if (p) PDS_RETURN_IF_ERROR(cuda_status(cudaFree(p), "cudaFree (scratch)"));  // synchronises: nothing in flight uses it
    p = nullptr;
    bytes = 0;
    PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, need), "cudaMalloc (scratch)"));
    bytes = need;
    ++scratch_generation_;
  }
  return static_cast<T*>(p);
}

template <typename T>
Result<T*> CudaModel::upload_scratch(int slot, const std::vector<T>& v) {
  PDS_ASSIGN_OR_RETURN(T* p, scratch<T>(slot, v.size()));
  if (!v.empty())
    PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream_), "upload"));
  return p;
}

// Explicit instantiations for cuda_layers.cpp.
template Result<float*> CudaModel::scratch<float>(int, size_t);
template Result<int32_t*> CudaModel::scratch<int32_t>(int, size_t);
template Result<unsigned char*> CudaModel::scratch<unsigned char>(int, size_t);
template Result<int32_t*> CudaModel::upload_scratch<int32_t>(int, const std::vector<int32_t>&);

Status CudaModel::plan_mla(const int32_t* ctx, int64_t rows, bool in_graph, Step* st) {
  st->mla = MlaDecodeWork{};
  if (!opts_.split_kv_mla || mla_layers_ == 0) return Status::ok();
  if (kv_dtype_ == DType::kBF16 && !split_kv_bf16_ok_) return Status::ok();  // mla_attend_latent reads the bf16 pages
  const int64_t capacity = mla_decode_plan_capacity(rows);
  MlaDecodePlan plan;
  PDS_RETURN_IF_ERROR(build_mla_decode_plan(ctx, rows, page_size_, capacity, &plan));
  // Grow-only: a graph's buffer was sized for the largest bucket, so its pointer stays put.
  PDS_ASSIGN_OR_RETURN(int32_t* d_plan, upload_scratch(kMlaPlan, plan.image));
  st->mla.plan = d_plan;
  st->mla.capacity = capacity;
  // The plan's copy ring for this step's shape. A graph keeps the ring it was captured with;
  // every ring reads the same plan image, so a replay stays correct either way. Not the
  // one-tile items' kLeanPrefetch: a bucket's graph captured on short contexts would keep it
  // when they grow (1-9% slower there), and without early_mla_decode its pre-wait window is
  // about nil (the plain q absorb before it does not trigger early; design.md "MLA split-KV
  // decode"); with it, kLeanEarly's copies take that window.
  // Nor the block-softmax forms (kLeanBlock*, the plan's pick for items of one or two tiles):
  // correct at any item length, but a graph captured on short contexts would keep them past two
  // tiles an item, where they are not the measured pick (docs/perf.md, MLA decode, fourteenth
  // version); the engine keeps kLean until they are measured there.
  // Nor the block-softmax early form (kLeanBlockEarly, the plan's pick for one-tile items): the
  // same reason as kLeanBlock*.
  // With early_mla_decode (the default) kLeanEarly runs wherever kLean would: kLean's ring and
  // loop whose CTAs read their page-table entries and issue their first tiles' bulk copies
  // before the pdl wait, while the q absorb before it (then triggering at its start,
  // mla_layer) still runs. Correct at any item length (a graph captured on short contexts stays
  // correct as they grow) and 1.01-1.19x kLean at every measured kernel shape (docs/perf.md,
  // MLA decode, fifteenth version); mla_layer passes new_tokens 0 (why: there).
  const bool keep_lean = plan.ring == MlaDecodeRing::kLeanPrefetch || plan.ring == MlaDecodeRing::kLeanBlock ||
                         plan.ring == MlaDecodeRing::kLeanBlockPrefetch || plan.ring == MlaDecodeRing::kLeanBlockEarly ||
                         plan.ring == MlaDecodeRing::kLeanEarly;
  st->mla.ring = keep_lean ? MlaDecodeRing::kLean : plan.ring;
  if (opts_.early_mla_decode && st->mla.ring == MlaDecodeRing::kLean) st->mla.ring = MlaDecodeRing::kLeanEarly;
  // The separate merge's form (early loads for rows of many items); not kSeparateShort, which
  // the plan picks only with the block-softmax rings the engine does not run (it would stay
  // captured as rows grow past 64 items, where it is slower).
  st->mla.merge_mode = plan.merge == MlaDecodeMerge::kSeparateShort ? MlaDecodeMerge::kAuto : plan.merge;
  // The fused merge's counters: zeroed when the buffer is new (here, outside any capture);
  // every run leaves them zero, so graphs replay without a reset node.
  PDS_ASSIGN_OR_RETURN(int32_t* counters, scratch<int32_t>(kMlaCounters, mla_decode_counter_words(rows, capacity)));
  if (counters != mla_counters_zeroed_ || scratch_generation_ != mla_counters_generation_) {  // a new (or moved) buffer
    PDS_RETURN_IF_ERROR(cuda_status(
        cudaMemsetAsync(counters, 0, mla_decode_counter_words(rows, capacity) * sizeof(int32_t), stream_), "mla counters"));
    mla_counters_zeroed_ = counters;
    mla_counters_generation_ = scratch_generation_;
  }
  if (opts_.fused_mla_merge) {
    st->mla.counters = counters;
    st->mla.merge_mode = MlaDecodeMerge::kFused;
  }
  // A graph holds the launch: the capacity's CTAs (surplus ones exit) and the merge always.
  st->mla.launch_items = in_graph ? capacity : plan.num_items;
  st->mla.merge = in_graph || plan.any_split || plan.any_empty;
  return Status::ok();
}

// The same checks as Model::validate, against the device pools' geometry: a bad batch is an
// error before anything is touched.
Status CudaModel::check(const ForwardBatch& batch) const {
  std::set<int32_t> slots;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceInput& seq = batch.seqs[s];
    const std::string who = "cuda forward: sequence " + std::to_string(s);
    if (seq.tokens.empty()) return invalid_argument(who + " has no tokens");
    if (seq.cached_len < 0) return invalid_argument(who + " has a negative cached length");
    for (int32_t t : seq.tokens)
      if (t < 0 || t >= cfg_.vocab_size) return invalid_argument(who + ": token id " + std::to_string(t) + " is outside the vocabulary");
    const int64_t need = (seq.cached_len + static_cast<int64_t>(seq.tokens.size()) + page_size_ - 1) / page_size_;
    if (static_cast<int64_t>(seq.pages.size()) < need)
      return invalid_argument(who + " needs " + std::to_string(need) + " pages, has " + std::to_string(seq.pages.size()));
    for (int32_t p : seq.pages)
      if (p < 0 || p >= num_pages_) return invalid_argument(who + ": page " + std::to_string(p) + " does not exist");
    if (seq.state_slot < 0 || seq.state_slot >= num_slots_)
      return invalid_argument(who + ": state slot " + std::to_string(seq.state_slot) + " does not exist");
    if (!slots.insert(seq.state_slot).second) return invalid_argument(who + ": state slot used twice in one batch");
  }
  return Status::ok();
}

Status CudaModel::forward(const ForwardBatch& batch, ForwardOutput* out) {
  if (!staged()) return forward_rows(batch, out);
  stage_received_ = stage_sent_ = false;
  Status st = forward_rows(batch, out);
  if (st.is_ok()) return st;
  // The neighbours wait for exactly one message each per forward (pipeline.h): read the
  // input that was not read, and pass the failure on instead of the activations.
  if (!first_stage() && !stage_received_) {
    int64_t T = 0;
    for (const SequenceInput& seq : batch.seqs) T += static_cast<int64_t>(seq.tokens.size());
    drain_upstream(T);
  }
  if (!last_stage() && !stage_sent_) (void)send_failure(st);
  return st;
}

Status CudaModel::forward_rows(const ForwardBatch& batch, ForwardOutput* out) {
  PDS_RETURN_IF_ERROR(check(batch));
  PDS_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));  // the calling thread may be new
  if (const int64_t bucket = decode_bucket(batch); bucket > 0) return forward_graph(batch, bucket, out);

  // Host-side indices of this step: rows, MLA page entries and per-row block tables.
  Step st;
  std::vector<int32_t> ids;
  for (const SequenceInput& seq : batch.seqs) {
    st.row_begin.push_back(st.rows);
    st.rows += static_cast<int64_t>(seq.tokens.size());
    ids.insert(ids.end(), seq.tokens.begin(), seq.tokens.end());
    st.max_pages = std::max<int64_t>(st.max_pages, static_cast<int64_t>(seq.pages.size()));
    if (seq.cached_len == 0 && slot_floats_ > 0)
      PDS_RETURN_IF_ERROR(cuda_status(
          cudaMemsetAsync(state_ + seq.state_slot * slot_floats_, 0, slot_floats_ * sizeof(float), stream_), "zero slot"));
  }
  const int64_t T = st.rows;
  std::vector<int32_t> entry, ctx, table(T * st.max_pages, 0);
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceInput& seq = batch.seqs[s];
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      const int64_t pos = seq.cached_len + static_cast<int64_t>(i);
      entry.push_back(static_cast<int32_t>(seq.pages[pos / page_size_] * page_size_ + pos % page_size_));
      ctx.push_back(static_cast<int32_t>(pos + 1));
      std::copy(seq.pages.begin(), seq.pages.end(), table.begin() + (st.row_begin[s] + i) * st.max_pages);
    }
  }
  st.batch = &batch;
  PDS_ASSIGN_OR_RETURN(int32_t* d_ids, upload_scratch(kIds, ids));
  PDS_ASSIGN_OR_RETURN(st.entry, upload_scratch(kEntry, entry));
  PDS_ASSIGN_OR_RETURN(st.ctx_len, upload_scratch(kCtxLen, ctx));
  PDS_ASSIGN_OR_RETURN(st.page_table, upload_scratch(kPageTable, table));
  if (T == static_cast<int64_t>(batch.seqs.size()) && slot_floats_ > 0) {
    // Eager decode step: one row -> slot table, uploaded once and shared by every KDA layer.
    std::vector<int32_t> slots;
    for (const SequenceInput& seq : batch.seqs) slots.push_back(seq.state_slot);
    PDS_ASSIGN_OR_RETURN(st.slots, upload_scratch(kKdaSlots, slots));
  }
  const bool prefill = T > static_cast<int64_t>(batch.seqs.size());
  if (prefill && opts_.bf16_mla_prefill && mla_layers_ > 0 &&
      mla_prefill_supported(cfg_.qk_nope_head_dim, cfg_.qk_rope_head_dim, cfg_.v_head_dim, cfg_.kv_lora_rank)) {
    std::vector<MlaPrefillSeq> seqs;
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const SequenceInput& seq = batch.seqs[s];
      seqs.push_back({st.row_begin[s], static_cast<int64_t>(seq.tokens.size()), seq.cached_len, seq.pages.data()});
    }
    PDS_RETURN_IF_ERROR(build_mla_prefill_plan(seqs, page_size_, &st.mla_prefill_host));
    PDS_ASSIGN_OR_RETURN(int32_t* d_plan, upload_scratch(kMlaPrefillPlan, st.mla_prefill_host.image));
    st.mla_prefill = d_plan;
  } else {
    // Prefill chunks too: each query row is its own (row, prefix) item of the split-KV plan.
    PDS_RETURN_IF_ERROR(plan_mla(ctx.data(), T, /*in_graph=*/false, &st));
  }

  // Final norm and lm_head only for the rows the caller wants.
  out->vocab = cfg_.vocab_size;
  out->first_row.clear();
  out->num_rows.clear();
  std::vector<int32_t> rows;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const int64_t n = static_cast<int64_t>(batch.seqs[s].tokens.size());
    out->first_row.push_back(static_cast<int64_t>(rows.size()));
    out->num_rows.push_back(batch.seqs[s].all_logits ? n : 1);
    for (int64_t i = batch.seqs[s].all_logits ? 0 : n - 1; i < n; ++i) rows.push_back(static_cast<int32_t>(st.row_begin[s] + i));
  }
  const int64_t R = static_cast<int64_t>(rows.size()), V = cfg_.vocab_size;
  PDS_ASSIGN_OR_RETURN(int32_t* d_rows, upload_scratch(kRows, rows));
  float* logits = nullptr;
  PDS_RETURN_IF_ERROR(run_body(st, d_ids, d_rows, R, &logits));
  if (!last_stage()) {  // the activations went on to the next stage; the logits come from the last
    out->logits.clear();
    return Status::ok();
  }
  out->logits.resize(R * V);
  if (comm_) return gather_logits(logits, R, out);
  PDS_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(out->logits.data(), logits, R * V * sizeof(float), cudaMemcpyDeviceToHost, stream_), "logits"));
  return cuda_status(cudaStreamSynchronize(stream_), "cuda forward");
}

Status CudaModel::run_body(const Step& st, const int32_t* d_ids, const int32_t* d_rows, int64_t R, float** logits_out) {
  const ModelConfig& c = cfg_;
  const int64_t hd = c.hidden_size, T = st.rows;
  const float eps = static_cast<float>(c.rms_norm_eps);
  PDS_ASSIGN_OR_RETURN(float* x, scratch<float>(kX, T * hd));
  PDS_ASSIGN_OR_RETURN(float* normed, scratch<float>(kNormed, T * hd));
  PDS_ASSIGN_OR_RETURN(float* block_out, scratch<float>(kBlockOut, T * hd));
  PDS_ASSIGN_OR_RETURN(float* mixed, scratch<float>(kMixed, T * hd));
  const int64_t max_bank = c.attn_residuals() ? (c.num_layers + c.attn_res_block_size - 1) / c.attn_res_block_size : 0;
  PDS_ASSIGN_OR_RETURN(float* bank, scratch<float>(kBank, max_bank * T * hd));
  int bank_count = 0;
  if (first_stage()) {
    PDS_RETURN_IF_ERROR(gather_rows(w_.embed.p, hd, d_ids, T, x, stream_));
  } else {
    PDS_RETURN_IF_ERROR(recv_activations(T, x, bank, &bank_count));
  }

  auto mix = [&](const float* partial, const float* score, float* dst) {
    return attn_res_mix(bank, bank_count, partial, T, hd, score, eps, dst, stream_);
  };
  auto attention = [&](const DeviceLayer& l, const float* in, float* o) -> Status {
    PDS_RETURN_IF_ERROR(rms_norm(in, T, hd, l.input_norm, eps, normed, stream_));
    PDS_RETURN_IF_ERROR(l.kind == LayerKind::kMla ? mla_layer(l, st, normed, o) : kda_layer(l, st, normed, o));
    return reduce_partial(o, T * hd);
  };
  auto ffn = [&](const DeviceLayer& l, const float* in, float* o) -> Status {
    PDS_RETURN_IF_ERROR(rms_norm(in, T, hd, l.post_attn_norm, eps, normed, stream_));
    if (l.is_moe) return moe(l, normed, T, o);  // reduces its routed and shared parts itself
    PDS_RETURN_IF_ERROR(mlp(l.mlp, normed, T, o));
    return reduce_partial(o, T * hd);
  };
  auto copy = [&](float* dst, const float* src) {
    return cuda_status(cudaMemcpyAsync(dst, src, T * hd * sizeof(float), cudaMemcpyDeviceToDevice, stream_), "copy");
  };

  const LayerSpan& span = model_->layers();
  for (int64_t i = span.begin; i < span.end; ++i) {
    const DeviceLayer& l = w_.layers[i];
    if (!c.attn_residuals()) {
      PDS_RETURN_IF_ERROR(attention(l, x, block_out));
      PDS_RETURN_IF_ERROR(add_inplace(x, block_out, T * hd, stream_));
      PDS_RETURN_IF_ERROR(ffn(l, x, block_out));
      PDS_RETURN_IF_ERROR(add_inplace(x, block_out, T * hd, stream_));
      continue;
    }
    // x is the running partial sum of the current block (see Model::forward).
    const float* attn_in = x;
    if (bank_count > 0) {
      PDS_RETURN_IF_ERROR(mix(x, l.attn_res_score, mixed));
      attn_in = mixed;
    }
    PDS_RETURN_IF_ERROR(attention(l, attn_in, block_out));
    if (i % c.attn_res_block_size == 0) {
      if (bank_count + 1 >= kMaxAttnResSources) return unsupported("cuda backend: too many attention-residual blocks");
      PDS_RETURN_IF_ERROR(copy(bank + bank_count * T * hd, x));  // snapshot before this layer's attention
      ++bank_count;
      PDS_RETURN_IF_ERROR(copy(x, block_out));
    } else {
      PDS_RETURN_IF_ERROR(add_inplace(x, block_out, T * hd, stream_));
    }
    PDS_RETURN_IF_ERROR(mix(x, l.mlp_res_score, mixed));
    PDS_RETURN_IF_ERROR(ffn(l, mixed, block_out));
    PDS_RETURN_IF_ERROR(add_inplace(x, block_out, T * hd, stream_));
  }
  if (!last_stage()) {
    *logits_out = nullptr;
    return send_activations(T, x, bank, bank_count);
  }
  if (c.attn_residuals()) {
    PDS_RETURN_IF_ERROR(mix(x, w_.output_res_score, mixed));
    std::swap(x, mixed);
  }

  const int64_t V = c.vocab_size;
  PDS_ASSIGN_OR_RETURN(float* h, scratch<float>(kHead, R * hd));
  PDS_ASSIGN_OR_RETURN(float* logits, scratch<float>(kLogits, R * V));
  PDS_RETURN_IF_ERROR(gather_rows(x, hd, d_rows, R, h, stream_));
  PDS_RETURN_IF_ERROR(rms_norm(h, R, hd, w_.final_norm, eps, h, stream_));
  PDS_RETURN_IF_ERROR(matmul_nt(h, R, w_.lm_head.p, w_.lm_head.rows, hd, logits, stream_));
  *logits_out = logits;
  return Status::ok();
}

Status CudaModel::reduce_partial(float* data, int64_t n) {
  return comm_ ? comm_->all_reduce_sum(data, n, stream_) : Status::ok();
}

// Each rank's lm_head holds a contiguous slice of the vocabulary: gather the [R, V/size]
// slices as [size][R][V/size] and lay them out by row on the host.
Status CudaModel::gather_logits(const float* mine, int64_t R, ForwardOutput* out) {
  const int64_t V = cfg_.vocab_size, vl = w_.lm_head.rows, n = comm_->size();
  PDS_ASSIGN_OR_RETURN(float* all, scratch<float>(kTpGathered, n * R * vl));
  PDS_RETURN_IF_ERROR(comm_->all_gather(mine, R * vl, all, stream_));
  std::vector<float> host(n * R * vl);
  PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(host.data(), all, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_), "logits"));
  PDS_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "cuda forward"));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < R; ++i)
      std::copy(&host[(r * R + i) * vl], &host[(r * R + i + 1) * vl], &out->logits[i * V + r * vl]);
  return Status::ok();
}

}  // namespace pdserve::cuda

namespace pdserve {

Result<std::unique_ptr<DeviceForward>> make_cuda_forward(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                         int64_t num_slots, CudaForwardOptions opts) {
  PDS_ASSIGN_OR_RETURN(auto m, cuda::CudaModel::create(std::move(model), num_pages, page_size, num_slots, opts));
  return std::unique_ptr<DeviceForward>(std::move(m));
}

}  // namespace pdserve
