// Pipeline stages on the GPU when the stages span nodes (`--device cuda --pp P --nnodes N`,
// docs/design.md "Pipeline stages on several nodes"): each node builds only its own stages,
// and every stage of every node joins one NCCL group of P ranks, rank = global stage number,
// so the stages' send/recv (kernels/backend/cuda_pp_stage.cpp) address their neighbours
// across nodes exactly as on one node. A header of its own (not device_forward.h) so that
// adding it did not rebuild everything that includes the group.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pdserve/model/device_forward.h"

namespace pdserve {

// stages[i] is global stage first_stage + i of total_stages (loaded with its LayerSpan), on
// local CUDA device i, joined through `group_id` (node 0's NCCL unique id, handed out in the
// node control stream's Hello; every node calls this at about the same time: the join blocks
// until all P ranks are in). An empty id means one node holding every stage (then
// first_stage 0, stages.size() == total_stages): make_cuda_pp_forwards. Refuses, saying so,
// stages that are not the ones named, too few GPUs for the local stages, or no NCCL.
Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_node_pp_forwards(const std::vector<std::shared_ptr<const Model>>& stages,
                                                                               const std::vector<uint8_t>& group_id, int total_stages,
                                                                               int first_stage, int64_t num_pages, int64_t page_size,
                                                                               int64_t num_slots, CudaForwardOptions opts = {});

}  // namespace pdserve
