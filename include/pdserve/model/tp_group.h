// A tensor- and pipeline-parallel group on the CPU backend: pp stages of tp ranks each, one
// Model shard, KV pool and KDA state pool per rank; ranks run as threads of this process,
// meet in an in-process communicator per stage and pass activations stage -> stage over an
// in-process StageChannel per TP rank (pipeline.h). Page and slot ids are the same on every
// rank (allocation is mirrored), so one batch description drives all ranks. A group of one
// rank is the plain single-model case, so the engine always runs through a group.
//
// With pp > 1 each stage's pools hold only its own layers; kv(r) / state(r) are then
// whole-model host pools (every layer at its global index) that keep the accounting and that
// the transfer layer reads: cache_to_host gathers a region's bytes from the stages into them.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "pdserve/model/device_forward.h"
#include "pdserve/model/model.h"
#include "pdserve/model/pipeline.h"

namespace pdserve {

class TpModelGroup {
 public:
  static Result<std::unique_ptr<TpModelGroup>> load(const std::string& dir, int tp_size, int64_t num_pages,
                                                    int64_t page_size, int64_t num_slots, int pp_size = 1);
  // The rank shards only; call make_pools() before forward(). `pp_size` stages of
  // `tp_size` ranks each; the layers are split by plan_pipeline_stages.
  static Result<std::unique_ptr<TpModelGroup>> load_models(const std::string& dir, int tp_size, int pp_size = 1);
  // One node's stages of a pipeline that spans nodes: stages first_stage..first_stage +
  // local_stages - 1 of `pp_total` (the split plan_pipeline_stages makes for pp_total), each
  // of `tp_size` ranks in this process. The links to the other nodes' stages come with
  // link_stages(); the stages there must get the same batches (set_step_sender).
  static Result<std::unique_ptr<TpModelGroup>> load_stage_models(const std::string& dir, int tp_size, int pp_total, int first_stage,
                                                                 int local_stages);
  // One node's part of a group that spans processes: comms[i] is global rank first_rank + i
  // of tp_total (e.g. TCP collectives, transfer/tcp_collective.h). size() is then the local
  // rank count; the shards and pools are those of the global ranks.
  static Result<std::unique_ptr<TpModelGroup>> load_node_models(const std::string& dir, int tp_total, int first_rank,
                                                                std::vector<std::unique_ptr<Communicator>> comms);
  // A one-rank group around an already loaded (unsharded) model.
  static std::unique_ptr<TpModelGroup> from_model(std::shared_ptr<const Model> model);
  // Builds every rank's MLA page pool and KDA state pool (replacing earlier ones); every MLA
  // pool (ranks, pipeline stages, remote ranks) holds its entries in `kv_dtype`.
  void make_pools(int64_t num_pages, int64_t page_size, int64_t num_slots, DType kv_dtype = DType::kF32);
  // Tensor-parallel ranks (per stage).
  int size() const { return tp_; }
  // Pipeline stages in this process; with stages on several nodes, the first one's global
  // index is first_stage() and the whole pipeline has total_stages().
  int pp() const { return pp_; }
  int first_stage() const { return stage0_; }
  int total_stages() const { return pp_total_; }
  bool holds_last_stage() const { return stage0_ + pp_ == pp_total_; }
  const ModelConfig& config() const { return models_[0]->config(); }

  // Runs `batch` on every rank at once; `out` gets the (gathered, identical) logits of rank 0
  // (of the last stage). With pp > 1 the batch flows through the stages in micro-batches and
  // a sequence that any stage failed comes back in out->seq_status (the others are good).
  // With a device forward set, the batch is validated against the host pools (which keep
  // the accounting) and then runs on the device; `opts` is not used there.
  Status forward(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts = {});

  // Called by forward() with every batch that passed validation, before the local ranks run
  // it: the leader of a multi-node instance sends it to the other nodes there. An error fails
  // the step; after any cross-node failure (this, or a communicator's health()) the group
  // refuses every later forward with that error, since the other nodes' caches are lost.
  using StepSender = std::function<Status(const ForwardBatch&)>;
  void set_step_sender(StepSender s) { step_sender_ = std::move(s); }
  // Marks the group as having lost a node (a watcher noticed it between or during steps); safe
  // from any thread. The first call aborts the device ranks' collectives (a forward blocked
  // in one then returns, and forward() reports this loss), later ones change nothing.
  void lose_node(const Status& why) { (void)break_group(why); }
  // Not ok once the group lost a node (see set_step_sender). Safe from any thread.
  Status health() const {
    std::lock_guard<std::mutex> l(broken_mu_);
    return broken_;
  }

  Result<std::vector<int32_t>> allocate_pages(int64_t n);
  Status free_pages(const std::vector<int32_t>& pages);
  Result<int32_t> allocate_slot();
  Status free_slot(int32_t slot);

  MlaKvPool& kv(int rank) { return *kv_[rank]; }
  KdaStatePool& state(int rank) { return *state_[rank]; }
  // One stage's own pools (its layers only); with pp == 1 these are kv(rank) / state(rank).
  MlaKvPool& stage_kv(int stage, int rank) { return pp_total_ == 1 ? *kv_[rank] : *stage_kv_[stage * tp_ + rank]; }
  KdaStatePool& stage_state(int stage, int rank) { return pp_total_ == 1 ? *state_[rank] : *stage_state_[stage * tp_ + rank]; }
  const Model& model(int rank) const { return *models_[rank]; }
  const Model& stage_model(int stage, int rank) const { return *models_[stage * tp_ + rank]; }
  std::shared_ptr<const Model> model_ptr(int rank) const { return models_[rank]; }
  std::shared_ptr<const Model> stage_model_ptr(int stage, int rank) const { return models_[stage * tp_ + rank]; }

  // Pipeline knobs. Micro-batches per round (whole sequences each; at most one per sequence);
  // default: one per stage.
  void set_micro_batches(int n) { micro_batches_ = n < 1 ? 1 : n; }
  // Replaces the in-process stage channels (e.g. with NCCL ones): channels[s * tp + r] is
  // stage s's endpoint of TP rank r's pipeline.
  Status set_stage_channels(std::vector<std::unique_ptr<StageChannel>> channels);
  // Stages on several nodes: up[r] carries TP rank r's activations from stage first_stage()-1
  // into this node, down[r] from its last stage to the next node's first (empty at the
  // pipeline's ends). Rewires the stage channels (make_spliced_stage_channel).
  Status link_stages(std::vector<std::unique_ptr<StageChannel>> up, std::vector<std::unique_ptr<StageChannel>> down);
  // The node holding stage 0 of a pipeline over several nodes hears from the other nodes
  // after its own stages ran a round: one RemoteRound per other node, its verdict on each
  // sequence (its stages' agreement) and, from the node with the last stage, the logits of
  // every sequence in batch order (rows of failed ones zero). An error breaks the group.
  struct RemoteRound {
    std::vector<Status> seq_status;
    std::vector<float> logits;
  };
  using RoundCollector = std::function<Status(const ForwardBatch&, std::vector<RemoteRound>*)>;
  void set_round_collector(RoundCollector c) { round_collector_ = std::move(c); }
  // Tests: a stage's verdict on one sequence after running it (not ok: that stage failed it
  // mid-flight). Called by rank 0 of each stage.
  using StageFault = std::function<Status(int stage, const SequenceInput& seq)>;
  void set_stage_fault(StageFault f) { fault_ = std::move(f); }

  // Hands the forward to a device backend (its pools must have this group's geometry): one
  // DeviceForward for a one-rank group, or one per rank (rank r's at index r), which then run
  // in the rank threads exactly as the CPU ranks do. With pp > 1: one per stage and rank
  // (index stage * tp + rank, each holding its stage's layers and pools, passing activations
  // itself, e.g. make_cuda_pp_forwards); the stage channels are then unused. A device forward
  // whose MLA cache dtype (DeviceForward::kv_cache_dtype) is not the host pools' is refused.
  Status set_device_forward(std::unique_ptr<DeviceForward> device);
  Status set_device_forwards(std::vector<std::unique_ptr<DeviceForward>> devices);
  const DeviceForward* device_forward() const { return devices_.empty() ? nullptr : devices_[0].get(); }
  // With device forwards: copies `region` device -> host pools of every rank (before the
  // transfer layer reads them) or host -> device (after it wrote them). With pp > 1 the
  // region moves between the stages' pools and the whole-model pools kv(r) / state(r).
  // Otherwise the host pools are the cache itself, so both do nothing.
  Status cache_to_host(const CacheRegion& region);
  Status cache_to_device(const CacheRegion& region);

  // The decode role's leader of a multi-node instance receives the whole instance's cache
  // (every global rank's pages and KDA head slice) from prefill, then forwards the other
  // nodes' share over the node control stream (docs/design.md, "Decode across nodes").
  // make_remote_pools adds host pools for global ranks size()..tp_total-1 (same geometry as
  // kv(0) / state(0), storage only: the accounting stays on rank 0); transfer_kv(r) /
  // transfer_state(r) are the pools of global rank r, local or not, that the transfer layer
  // registers. Without remote pools transfer_ranks() == size().
  void make_remote_pools(int tp_total);
  int transfer_ranks() const { return tp_ + static_cast<int>(remote_kv_.size()); }
  MlaKvPool& transfer_kv(int r) { return r < tp_ ? *kv_[r] : *remote_kv_[r - tp_]; }
  KdaStatePool& transfer_state(int r) { return r < tp_ ? *state_[r] : *remote_state_[r - tp_]; }
  // Called by cache_to_device after the local upload (on the engine thread, so before any
  // step that reads the region is sent); an error breaks the group like a failed step send.
  using CacheForwarder = std::function<Status(const CacheRegion&)>;
  void set_cache_forwarder(CacheForwarder f) { cache_forwarder_ = std::move(f); }
  // The prefill role's mirror image: called by cache_to_host after the local download, to
  // gather the other nodes' share into the remote pools before the transfer layer reads them.
  void set_cache_fetcher(CacheForwarder f) { cache_fetcher_ = std::move(f); }

 private:
  Status check_device_dtype(const DeviceForward& d) const;
  Status run_local_ranks(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts);
  Status forward_pipeline(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts);
  // Stage pools <-> whole-model pools for one region (to_global: gather, else scatter).
  void move_stage_region(const CacheRegion& region, bool to_global);
  Status upload_region(const CacheRegion& region);    // cache_to_device's local half
  Status download_region(const CacheRegion& region);  // cache_to_host's local half

  int tp_ = 1, pp_ = 1, micro_batches_ = 1, stage0_ = 0, pp_total_ = 1;
  RoundCollector round_collector_;
  std::vector<std::unique_ptr<Communicator>> comms_;   // [stage * tp + rank]
  std::vector<std::shared_ptr<const Model>> models_;   // [stage * tp + rank]
  std::vector<std::unique_ptr<StageChannel>> channels_;  // [stage * tp + rank]; pp > 1 only
  std::vector<std::unique_ptr<MlaKvPool>> kv_;         // [rank]
  std::vector<std::unique_ptr<KdaStatePool>> state_;  // [rank]
  std::vector<std::unique_ptr<MlaKvPool>> stage_kv_;   // [stage * tp + rank]; pp > 1 only
  std::vector<std::unique_ptr<KdaStatePool>> stage_state_;
  std::vector<std::unique_ptr<DeviceForward>> devices_;
  std::vector<std::unique_ptr<MlaKvPool>> remote_kv_;      // [global rank - size()]
  std::vector<std::unique_ptr<KdaStatePool>> remote_state_;
  CacheForwarder cache_forwarder_, cache_fetcher_;
  StageFault fault_;
  StepSender step_sender_;
  // The one place the group turns broken: records the first cause, and on that transition
  // aborts the device collectives (DeviceForward::abort_collectives). Returns the error.
  Status break_group(const Status& why);
  mutable std::mutex broken_mu_;
  Status broken_ = Status::ok();
};

}  // namespace pdserve
