// make_cuda_tp_forwards: one CudaModel per tensor-parallel rank, rank r on device r, joined
// by an NCCL group of threads of this process; the node variants join a group over nodes, and
// the pipeline variants one CudaModel per stage (rank = global stage).
#include <cuda_runtime.h>

#include "backend/cuda_model.h"
#include "common/cuda_check.h"
#include "nccl/device_comm.h"
#include "pdserve/model/cuda_node_stages.h"

namespace pdserve {

Status check_cuda_devices(int tp, int pp) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices >= tp * pp) return Status::ok();
  const std::string need = std::to_string(tp * pp);
  if (pp == 1)
    return invalid_argument("--device cuda --tp " + std::to_string(tp) + " needs " + need + " GPUs (one per rank), this machine has " +
                            std::to_string(devices));
  return invalid_argument("--device cuda --pp " + std::to_string(pp) + (tp > 1 ? " --tp " + std::to_string(tp) : "") + " needs " + need +
                          " GPUs (one per stage" + (tp > 1 ? " and rank" : "") + "), this machine has " + std::to_string(devices));
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_tp_forwards(const std::vector<std::shared_ptr<const Model>>& shards,
                                                                          int64_t num_pages, int64_t page_size, int64_t num_slots,
                                                                          CudaForwardOptions opts) {
  const int size = static_cast<int>(shards.size());
  if (size < 1) return invalid_argument("cuda backend: no shards");
  PDS_RETURN_IF_ERROR(check_cuda_devices(size));
  std::vector<std::unique_ptr<DeviceForward>> out;
  if (size == 1) {
    PDS_ASSIGN_OR_RETURN(auto m, cuda::CudaModel::create(shards[0], num_pages, page_size, num_slots, opts));
    out.push_back(std::move(m));
    return out;
  }
  for (int r = 0; r < size; ++r)
    if (!shards[r] || shards[r]->shard().rank != r || shards[r]->shard().size != size)
      return invalid_argument("cuda backend: shard " + std::to_string(r) + " is not rank " + std::to_string(r) + " of " + std::to_string(size));
  PDS_ASSIGN_OR_RETURN(auto comms, cuda::make_nccl_group(size));
  for (int r = 0; r < size; ++r) {
    PDS_ASSIGN_OR_RETURN(auto m, cuda::CudaModel::create(shards[r], num_pages, page_size, num_slots, r, std::move(comms[r]), opts));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_pp_forwards(const std::vector<std::shared_ptr<const Model>>& stages,
                                                                          int64_t num_pages, int64_t page_size, int64_t num_slots,
                                                                          CudaForwardOptions opts) {
  return make_cuda_node_pp_forwards(stages, {}, static_cast<int>(stages.size()), 0, num_pages, page_size, num_slots, opts);
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_node_pp_forwards(const std::vector<std::shared_ptr<const Model>>& stages,
                                                                               const std::vector<uint8_t>& group_id, int total_stages,
                                                                               int first_stage, int64_t num_pages, int64_t page_size,
                                                                               int64_t num_slots, CudaForwardOptions opts) {
  const int local = static_cast<int>(stages.size());
  const bool one_node = group_id.empty();
  if (total_stages < 2) return invalid_argument("cuda backend: a pipeline needs at least two stages");
  if (local < 1 || first_stage < 0 || first_stage + local > total_stages || (one_node && local != total_stages))
    return invalid_argument("cuda backend: stages " + std::to_string(first_stage) + ".." + std::to_string(first_stage + local - 1) +
                            " are not whole stages of a " + std::to_string(total_stages) + "-stage pipeline" +
                            (one_node ? " on one node (no NCCL id from node 0)" : ""));
  if (one_node) {
    PDS_RETURN_IF_ERROR(check_cuda_devices(1, local));
  } else {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (devices < local)
      return invalid_argument("--device cuda --pp " + std::to_string(total_stages) + ": this node runs stages " + std::to_string(first_stage) +
                              ".." + std::to_string(first_stage + local - 1) + " and needs " + std::to_string(local) +
                              " GPUs (one per stage), it has " + std::to_string(devices));
  }
  for (int i = 0; i < local; ++i) {
    const int s = first_stage + i;
    if (!stages[i] || stages[i]->first_stage() != (s == 0) || stages[i]->last_stage() != (s == total_stages - 1))
      return invalid_argument("cuda backend: model " + std::to_string(i) + " is not pipeline stage " + std::to_string(s) + " of " +
                              std::to_string(total_stages));
  }
  // One NCCL group over every stage of every node (rank = global stage, local stage i on
  // device i); only send/recv between neighbours use it.
  std::vector<std::unique_ptr<cuda::DeviceCommunicator>> links;
  if (one_node) {
    PDS_ASSIGN_OR_RETURN(links, cuda::make_nccl_group(total_stages));
  } else {
    PDS_ASSIGN_OR_RETURN(links, cuda::make_nccl_node_group(group_id, total_stages, first_stage, local));
  }
  std::vector<std::unique_ptr<DeviceForward>> out;
  for (int i = 0; i < local; ++i) {
    PDS_ASSIGN_OR_RETURN(auto m, cuda::CudaModel::create_stage(stages[i], num_pages, page_size, num_slots, i, std::move(links[i]), opts));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_node_tp_forwards(const std::vector<std::shared_ptr<const Model>>& shards,
                                                                               const std::vector<uint8_t>& group_id, int world, int first_rank,
                                                                               int64_t num_pages, int64_t page_size, int64_t num_slots,
                                                                               CudaForwardOptions opts) {
  const int local = static_cast<int>(shards.size());
  if (local < 1) return invalid_argument("cuda backend: no shards");
  PDS_RETURN_IF_ERROR(check_cuda_devices(local));
  for (int i = 0; i < local; ++i)
    if (!shards[i] || shards[i]->shard().rank != first_rank + i || shards[i]->shard().size != world)
      return invalid_argument("cuda backend: local shard " + std::to_string(i) + " is not rank " + std::to_string(first_rank + i) + " of " +
                              std::to_string(world));
  PDS_ASSIGN_OR_RETURN(auto comms, cuda::make_nccl_node_group(group_id, world, first_rank, local));
  std::vector<std::unique_ptr<DeviceForward>> out;
  for (int i = 0; i < local; ++i) {
    PDS_ASSIGN_OR_RETURN(auto m, cuda::CudaModel::create(shards[i], num_pages, page_size, num_slots, i, std::move(comms[i]), opts));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace pdserve
