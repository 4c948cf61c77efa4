// Tensor parallelism for the model layer: which shard a rank holds, and the collectives
// its forward needs. On the CPU backend ranks are threads of one process joined by an
// in-process communicator; the CUDA backend implements the same interface over NCCL.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve {

// Rank `rank` of `size` holds 1/size of the attention heads (MLA and KDA), of the dense and
// shared MLPs' intermediate width, of the routed experts (contiguous ranges) and of the
// vocabulary rows of lm_head. Embedding, norms, router, latent projections and the MLA
// latent cache are replicated.
struct ShardSpec {
  int rank = 0;
  int size = 1;
  // [begin, end) of `total` units for this rank; `total` must divide by size.
  int64_t begin(int64_t total) const { return total / size * rank; }
  int64_t end(int64_t total) const { return total / size * (rank + 1); }
  int64_t local(int64_t total) const { return total / size; }
};

// Pipeline parallelism: the layers [begin, end) one stage owns (end < 0: to the last layer).
// The first stage also holds the embedding, the last the final norm and lm_head.
struct LayerSpan {
  int64_t begin = 0;
  int64_t end = -1;
  int64_t resolved_end(int64_t num_layers) const { return end < 0 ? num_layers : end; }
  bool first() const { return begin == 0; }
  bool last(int64_t num_layers) const { return resolved_end(num_layers) == num_layers; }
  bool contains(int64_t layer, int64_t num_layers) const { return layer >= begin && layer < resolved_end(num_layers); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank ends with the element-wise sum, added in rank order (the same bits on every
  // rank, so replicated computations after it stay identical).
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // out = [rank 0's n values, rank 1's n values, ...] on every rank.
  virtual void all_gather(const float* in, int64_t n, float* out) = 0;
  // Not ok once a collective failed (a cross-process group lost a peer): the results since
  // then are garbage and the group must stop (TpModelGroup::forward reports it).
  virtual Status health() const { return Status::ok(); }
};

// Ranks as threads: make(size) returns one communicator per rank; each must be used by its
// own thread, and every rank must call the same collectives in the same order.
std::vector<std::unique_ptr<Communicator>> make_in_process_group(int size);

}  // namespace pdserve
