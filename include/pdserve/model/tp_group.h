// A tensor-parallel group on the CPU backend: one Model shard, KV pool and KDA state pool
// per rank, ranks run as threads of this process and meet in an in-process communicator.
// Page and slot ids are the same on every rank (allocation is mirrored), so one batch
// description drives all ranks. A group of one rank is the plain single-model case, so the
// engine always runs through a group.
#pragma once

#include <memory>
#include <vector>

#include "pdserve/model/device_forward.h"
#include "pdserve/model/model.h"

namespace pdserve {

class TpModelGroup {
 public:
  static Result<std::unique_ptr<TpModelGroup>> load(const std::string& dir, int tp_size, int64_t num_pages,
                                                    int64_t page_size, int64_t num_slots);
  // The rank shards only; call make_pools() before forward().
  static Result<std::unique_ptr<TpModelGroup>> load_models(const std::string& dir, int tp_size);
  // A one-rank group around an already loaded (unsharded) model.
  static std::unique_ptr<TpModelGroup> from_model(std::shared_ptr<const Model> model);
  // Builds every rank's MLA page pool and KDA state pool (replacing earlier ones).
  void make_pools(int64_t num_pages, int64_t page_size, int64_t num_slots);
  int size() const { return static_cast<int>(models_.size()); }
  const ModelConfig& config() const { return models_[0]->config(); }

  // Runs `batch` on every rank at once; `out` gets the (gathered, identical) logits of rank 0.
  // With a device forward set, the batch is validated against the host pools (which keep
  // the accounting) and then runs on the device; `opts` is not used there.
  Status forward(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts = {});

  Result<std::vector<int32_t>> allocate_pages(int64_t n);
  Status free_pages(const std::vector<int32_t>& pages);
  Result<int32_t> allocate_slot();
  Status free_slot(int32_t slot);

  MlaKvPool& kv(int rank) { return *kv_[rank]; }
  KdaStatePool& state(int rank) { return *state_[rank]; }
  const Model& model(int rank) const { return *models_[rank]; }
  std::shared_ptr<const Model> model_ptr(int rank) const { return models_[rank]; }

  // Hands the forward to a device backend (its pools must have this group's geometry): one
  // DeviceForward for a one-rank group, or one per rank (rank r's at index r), which then run
  // in the rank threads exactly as the CPU ranks do.
  Status set_device_forward(std::unique_ptr<DeviceForward> device);
  Status set_device_forwards(std::vector<std::unique_ptr<DeviceForward>> devices);
  const DeviceForward* device_forward() const { return devices_.empty() ? nullptr : devices_[0].get(); }
  // With device forwards: copies `region` device -> host pools of every rank (before the
  // transfer layer reads them) or host -> device (after it wrote them). Without them the host
  // pools are the cache itself, so both do nothing.
  Status cache_to_host(const CacheRegion& region);
  Status cache_to_device(const CacheRegion& region);

 private:
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::shared_ptr<const Model>> models_;
  std::vector<std::unique_ptr<MlaKvPool>> kv_;
  std::vector<std::unique_ptr<KdaStatePool>> state_;
  std::vector<std::unique_ptr<DeviceForward>> devices_;
};

}  // namespace pdserve
