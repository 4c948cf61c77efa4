// The CUDA backend of the model layer: the whole (unsharded) Kimi-K3 / Kimi-Linear forward on
// one GPU behind the DeviceForward contract (pdserve/model/device_forward.h), correct-first.
//
// - Weights: every tensor of the loaded Model's ModelWeights copied to device memory in fp32
//   (plain cudaMalloc); MXFP4 experts stay packed, stacked over the experts of a layer.
// - Pools: MLA pages [mla_layer][page][page_size][kv_lora + rope] and KDA state slots (per
//   slot, per layer: conv [3][P][K-1] then recurrent [H][V][K]), exactly cache_pools.h's
//   layouts, indexed by the host pools' page and slot ids. The MLA pages in
//   CudaForwardOptions::kv_cache_dtype: fp32, or bf16 (uint16_t bit patterns, written rounded to
//   nearest even by mla_write_latents_bf16 and read exactly, as the CPU backend's bf16 pool).
// - The forward follows Model::forward step by step with the kernels of kernels/: MLA prefill
//   writes the chunk's latents first and lets each query row attend over its own prefix with
//   the paged kernel (or, with bf16_mla_prefill, the tensor-core prefill over expanded K/V);
//   KDA prefill runs the conv over the chunk and the token recurrence.
// - Decode steps (every sequence one new token, at most 64 of them) replay a CUDA graph per
//   batch-size bucket (1, 2, 4, ..., 64 rows, padded) over fixed input buffers (cuda_graphs.cpp);
//   the KDA state is reached through a device slot table, so a graph serves any slots.
// - A pipeline stage (the Model was loaded with a LayerSpan short of the whole model) holds
//   only its layers' weights and pools; it receives the residual stream and the
//   attention-residual snapshots from the previous stage and sends them on to the next, GPU
//   to GPU over NCCL send/recv (cuda_pp_stage.cpp). Only the last stage returns logits.
// Numbers differ from the CPU by fp32 summation order only (measured in docs/perf.md), unless
// bf16_mla_prefill puts the prefill attention on bf16 tensor cores.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "backend/device_weights.h"
#include "moe/moe_decode.h"
#include "nccl/device_comm.h"
#include "pdserve/model/device_forward.h"

namespace pdserve::cuda {

class CudaModel final : public DeviceForward {
 public:
  static Result<std::unique_ptr<CudaModel>> create(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                   int64_t num_slots, CudaForwardOptions opts = {});
  // A tensor-parallel rank: the model is that rank's shard, its buffers live on `device`, and
  // `comm` (same rank and size as the shard) joins the partial sums where Model::forward does.
  // Decode graphs are off for such a rank (NCCL inside captured graphs is not tested yet).
  static Result<std::unique_ptr<CudaModel>> create(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                   int64_t num_slots, int device, std::unique_ptr<DeviceCommunicator> comm,
                                                   CudaForwardOptions opts = {});
  // A pipeline stage: `model` was loaded with its LayerSpan, its buffers live on `device`, and
  // `stage_link` (rank = this stage's index, size = the stage count, on `device`) carries the
  // activations to and from the neighbouring stages. Decode graphs are off for a stage.
  static Result<std::unique_ptr<CudaModel>> create_stage(std::shared_ptr<const Model> model, int64_t num_pages, int64_t page_size,
                                                         int64_t num_slots, int device, std::unique_ptr<DeviceCommunicator> stage_link,
                                                         CudaForwardOptions opts = {});
  ~CudaModel() override;

  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;
  void abort_collectives() override {
    if (comm_) comm_->abort();
    if (stage_link_) stage_link_->abort();
  }
  std::string describe() const override;
  DType kv_cache_dtype() const override { return kv_dtype_; }
  Status download(const CacheRegion& region, MlaKvPool& kv, KdaStatePool& state) override;          // cuda_cache_copy.cpp
  Status upload(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) override;  // cuda_cache_copy.cpp

  // Device pools, for tests that compare them with the CPU's. kv_pool(): an fp32 pool's floats
  // (null on a bf16 pool); kv_pool_bf16(): a bf16 pool's bits (null on an fp32 pool);
  // kv_pool_bytes() either, kv_elems() * kv_elem_bytes() bytes.
  const float* kv_pool() const { return kv_dtype_ == DType::kF32 ? static_cast<const float*>(kv_) : nullptr; }
  const uint16_t* kv_pool_bf16() const { return kv_dtype_ == DType::kBF16 ? static_cast<const uint16_t*>(kv_) : nullptr; }
  const void* kv_pool_bytes() const { return kv_; }
  const float* state_pool() const { return state_; }
  int64_t kv_elems() const;
  int64_t kv_elem_bytes() const { return dtype_size(kv_dtype_); }
  int64_t state_floats() const;
  // Writable pools, for moving a request's pages and state in from another model (tests of
  // the prefill -> decode handover between GPUs).
  float* kv_pool() { return kv_dtype_ == DType::kF32 ? static_cast<float*>(kv_) : nullptr; }
  void* kv_pool_bytes() { return kv_; }
  float* state_pool() { return state_; }
  int device() const { return device_; }
  // Decode graphs captured so far (tests: graphs were used, not only the eager path).
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t graph_replays() const { return graph_replays_; }

 private:
  CudaModel() = default;
  Status check(const ForwardBatch& batch) const;
  Status forward_rows(const ForwardBatch& batch, ForwardOutput* out);
  // cuda_pp_stage.cpp: whether this model is a pipeline stage short of the first / last layer.
  bool first_stage() const { return model_->first_stage(); }
  bool last_stage() const { return model_->last_stage(); }
  bool staged() const { return !first_stage() || !last_stage(); }
  // The previous stage's message for a micro-batch of T rows: the residual stream into x,
  // the attention-residual snapshots into bank (their count into *bank_count), device to
  // device; or the previous stage's failure.
  Status recv_activations(int64_t T, float* x, float* bank, int* bank_count);
  // This stage's output for the next one (x, then bank_count snapshots of T rows each).
  Status send_activations(int64_t T, const float* x, const float* bank, int bank_count);
  // Instead of activations: the code of the error that stopped this stage.
  Status send_failure(const Status& why);
  // A stage that fails before reading its input still reads it, so the previous stage's send
  // (which waits for the matching recv) completes.
  void drain_upstream(int64_t T);
  Status check_region(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) const;
  // host_kv: the host pool's layer 0, host_kv_stride_bytes apart a layer (the device pool's dtype).
  Status copy_region(const CacheRegion& region, uint8_t* host_kv, int64_t host_kv_stride_bytes, float* host_slot, bool to_host);
  // Grow-only device scratch: buffer `slot`, at least `n` elements of T.
  template <typename T>
  Result<T*> scratch(int slot, size_t n);
  template <typename T>
  Result<T*> upload_scratch(int slot, const std::vector<T>& v);

  struct Step;  // per-forward indices (cuda_model.cpp)
  // Embedding, layers, final norm and lm_head for the rows `d_rows` (R of them) into the
  // kLogits scratch. Only stream work on buffers already sized: capturable.
  Status run_body(const Step& st, const int32_t* d_ids, const int32_t* d_rows, int64_t R, float** logits);
  // cuda_graphs.cpp: the bucket a decode batch replays, or 0 for the eager path.
  int64_t decode_bucket(const ForwardBatch& batch) const;
  Status forward_graph(const ForwardBatch& batch, int64_t bucket, ForwardOutput* out);
  void drop_graphs();
  Status mla_layer(const DeviceLayer& l, const Step& st, const float* x, float* out);
  Status finish_mla(const DeviceLayer& l, int64_t T, const float* x, float* attn, float* out);  // gate, o_proj
  // Builds the step's split-KV MLA plan from the rows' ctx_len (host) and uploads it (cuda_model.cpp).
  Status plan_mla(const int32_t* ctx, int64_t rows, bool in_graph, Step* st);
  Status kda_layer(const DeviceLayer& l, const Step& st, const float* x, float* out);
  Status mlp(const DeviceMlp& w, const float* x, int64_t rows, float* out);
  Status moe(const DeviceLayer& l, const float* x, int64_t rows, float* out);
  // Sums a rank's partial result over the group (no-op on one rank).
  Status reduce_partial(float* data, int64_t n);
  // Rank r's logits slice -> the full rows in out->logits (sized by the caller).
  Status gather_logits(const float* mine, int64_t rows, ForwardOutput* out);

  std::shared_ptr<const Model> model_;
  ModelConfig cfg_;
  DeviceWeights w_;
  int64_t num_pages_ = 0, page_size_ = 0, num_slots_ = 0;
  int64_t kda_layer_floats_ = 0, kda_conv_floats_ = 0, slot_floats_ = 0;
  int64_t kv_layer_stride_ = 0;  // elements (of kv_dtype_) a layer of MLA pages
  DType kv_dtype_ = DType::kF32;
  // A bf16 pool: whether the split-KV decode takes this shape (mla_decode.h: K3's widths, <= 3
  // heads a rank, pages a multiple of 16 tokens); else the MLA layers run mla_attend_latent.
  bool split_kv_bf16_ok_ = false;
  void* kv_ = nullptr;  // MLA pages, kv_elems() elements of kv_dtype_
  // One MLA layer's pages (pool layer `pool_layer`): fp32 or bf16, the other null.
  float* kv_layer_f32(int64_t pool_layer) const;
  uint16_t* kv_layer_bf16(int64_t pool_layer) const;
  float* state_ = nullptr;
  MoeDecodeWorkspace moe_queue_;  // the fused MoE decode kernel's queue (cuda_model.cpp)
  cudaStream_t stream_ = nullptr;
  std::vector<std::pair<void*, size_t>> scratch_;  // (pointer, bytes)
  uint64_t scratch_generation_ = 0;                 // bumped when a scratch buffer moves: graphs then re-capture
  int32_t* mla_counters_zeroed_ = nullptr;          // the MLA decode counters last zeroed (plan_mla) ...
  uint64_t mla_counters_generation_ = 0;            // ... at this scratch generation
  CudaForwardOptions opts_;
  int64_t graph_max_pages_ = 0;  // page-table width of the decode graphs
  struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;
  };
  std::vector<DecodeGraph> graphs_;  // one per bucket
  int32_t* graph_inputs_ = nullptr;  // fixed device inputs of the graphs (largest bucket)
  std::vector<int32_t> graph_host_;  // their host staging
  int64_t graphs_captured_ = 0, graph_replays_ = 0;
  size_t device_bytes_ = 0;
  int device_ = 0;
  std::unique_ptr<DeviceCommunicator> comm_;  // null on one rank
  std::unique_ptr<DeviceCommunicator> stage_link_;  // pipeline stages only: rank = stage index
  int64_t mla_layers_ = 0, kda_layers_ = 0;          // this model's (stage's) MLA / KDA layers: its pools' layer counts
  bool stage_received_ = false, stage_sent_ = false;  // this forward read its input / sent its output (stages only)
};

}  // namespace pdserve::cuda
