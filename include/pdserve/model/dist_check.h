// The GPU side of `pdserve dist-check`: this node's GPUs join a tensor-parallel group that
// spans nodes (ranks first_rank .. first_rank + local - 1 of world) with an NCCL unique id
// handed out by node 0, and run one all-reduce whose answer every rank can check. Declared
// here so the CLI links in builds without CUDA (the stub says so); implemented over
// kernels/nccl in kernels/backend/dist_check.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve {

struct RankAllReduceCheck {
  int rank = 0;          // global rank
  int device = 0;        // local CUDA device
  bool ok = false;       // every element equals `want`
  float got = 0;         // element 0 after the all-reduce
  float want = 0;        // 1 + 2 + ... + world: rank r contributes r + 1
  double ms = 0;         // the all-reduce alone, as this rank saw it
  int64_t mismatches = 0;
};

int cuda_visible_gpus();                                  // 0 without CUDA or GPUs
Result<std::vector<uint8_t>> cuda_nccl_unique_id();       // node 0's id for the group
std::string cuda_nccl_describe();                         // "NCCL 2.x.y from PATH", or why not
Result<std::vector<RankAllReduceCheck>> cuda_dist_all_reduce_check(const std::vector<uint8_t>& id, int world, int first_rank, int local,
                                                                   int64_t elements);

}  // namespace pdserve
