// A forward that runs somewhere other than the CPU (the CUDA backend), behind the same batch
// contract as Model::forward (model.h). The implementation owns its device pools (MLA pages,
// KDA state slots), indexed by the same page and slot ids that the host pools hand out; the
// host pools stay for accounting. Which implementations a build has is chosen in CMake:
// make_cuda_forward returns kUnsupported in a build without CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/model/model.h"

namespace pdserve {

class DeviceForward {
 public:
  virtual ~DeviceForward();
  // Same contract as Model::forward: writes the new tokens' latents into the device pages,
  // advances the device state slots, returns logits on the host.
  virtual Status forward(const ForwardBatch& batch, ForwardOutput* out) = 0;
  virtual std::string describe() const = 0;
};

// The whole (unsharded) model on CUDA device 0, pools of the given geometry.
Result<std::unique_ptr<DeviceForward>> make_cuda_forward(std::shared_ptr<const Model> model, int64_t num_pages,
                                                         int64_t page_size, int64_t num_slots);
// Whether this machine can hold `tp` ranks on the GPU (one GPU a rank), before any weights are
// loaded: the refusal names both counts.
Status check_cuda_devices(int tp);
// One forward per tensor-parallel rank (shards[r] is rank r's Model): rank r on CUDA device r,
// the ranks joined by NCCL. Refuses, saying so, when the machine has fewer GPUs than ranks or
// NCCL cannot be loaded. The forwards must run concurrently, one thread per rank
// (TpModelGroup::forward does).
Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_tp_forwards(const std::vector<std::shared_ptr<const Model>>& shards,
                                                                          int64_t num_pages, int64_t page_size, int64_t num_slots);

}  // namespace pdserve
