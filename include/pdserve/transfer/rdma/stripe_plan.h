// How one batch's writes become RDMA WRITE work requests over several NICs. Pure.
//
// 1. Writes are ordered by destination and merged where both source and destination continue
//    each other (a room's pages are usually contiguous runs on both sides), so 64 page writes
//    of one run become one work request, not 64.
// 2. A run of at least 2 * min_stripe_bytes is cut into up to `nics` shares, each a multiple
//    of `alignment` except the last; every piece is also cut at max_wr_bytes.
// 3. Each piece goes to the NIC with the fewest bytes so far (ties: lowest NIC), so no NIC
//    carries more than the least loaded one plus one piece.
// Writes of one batch must not overlap at the destination: they land in no defined order
// across NICs, so the planner refuses overlaps instead of leaving the outcome to chance.
//
// Bound: wrs.size() <= runs * nics + bytes / max_wr_bytes + runs, whatever the input.
#pragma once

#include <cstdint>
#include <vector>

#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

struct StripeOptions {
  uint64_t alignment = 4096;
  uint64_t min_stripe_bytes = 256 * 1024;
  uint64_t max_wr_bytes = 1ull << 30;
};

struct StripedWrite {
  int nic = 0;
  WriteOp op;
};

struct StripePlan {
  std::vector<StripedWrite> wrs;     // per NIC, in ascending destination order
  std::vector<uint64_t> nic_bytes;   // size nics
  std::vector<int> nic_wrs;          // size nics
  size_t runs = 0;                   // after merging
  uint64_t bytes = 0;
};

// kInvalidArgument for nics < 1, a zero-length write, overlapping destinations or bad options.
Result<StripePlan> plan_stripes(const std::vector<WriteOp>& writes, int nics, const StripeOptions& opt);

}  // namespace pdserve::transfer::rdma
