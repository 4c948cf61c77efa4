// Moving a request's KDA state between tensor-parallel layouts (prefill TP != decode TP).
//
// Every rank's slot holds, per KDA layer, conv [3][H_r*D][K-1] then recurrent [H_r][D][D],
// where H_r = H / tp and rank r owns global heads [r*H_r, (r+1)*H_r) (see cache_pools.h).
// A plan lists the copies, in floats relative to the slot's base on each side, that turn
// the prefill ranks' slots into the decode ranks' slots. Runs of consecutive heads that
// are contiguous on both sides are merged, so TP4 -> TP32 moves few, large runs.
// The MLA latent is replicated on every rank of both sides and is written once per
// decode rank by a single prefill rank.
#pragma once

#include <cstdint>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::disagg {

struct KdaStateShape {
  int64_t layers = 0;     // KDA layers
  int64_t heads = 0;      // total heads (all ranks)
  int64_t head_dim = 0;
  int64_t conv_tail = 0;  // K - 1 raw inputs kept per channel
};

struct StateRun {
  int src_rank = 0;
  int dst_rank = 0;
  int64_t src_offset = 0;  // floats from the source slot's base
  int64_t dst_offset = 0;  // floats from the destination slot's base
  int64_t length = 0;      // floats
};

// Floats in one rank's slot for a given TP size.
int64_t slot_floats(const KdaStateShape& s, int tp);
// Copies that rebuild every destination rank's slot from the source ranks' slots. Both TP
// sizes must divide the head count. Each destination float is written exactly once.
Result<std::vector<StateRun>> plan_state_copy(const KdaStateShape& s, int src_tp, int dst_tp);
// For each decode rank, the prefill rank that writes its copy of the (replicated) latent:
// decode rank d reads from prefill rank d * src_tp / dst_tp.
std::vector<int> latent_source_ranks(int src_tp, int dst_tp);

}  // namespace pdserve::disagg
