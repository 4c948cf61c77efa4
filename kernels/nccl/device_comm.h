// The collectives of a tensor-parallel group on the GPU: the device twin of
// pdserve/model/parallel.h's Communicator, over device pointers and a stream. Implemented
// over NCCL (nccl_comm.cpp), which is loaded at run time (dlopen of libnccl.so.2) so that a
// binary built with CUDA starts on machines without NCCL; only a group of several ranks
// needs it. A build without nccl.h gets nccl_comm_stub.cpp, whose factories say so.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::cuda {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;  // the CUDA device this rank's buffers live on
  // In place: every rank ends with the element-wise fp32 sum (the same bits on every rank:
  // NCCL's ring computes each element once and broadcasts it). Enqueued on `stream`.
  virtual Status all_reduce_sum(float* data, int64_t n, cudaStream_t stream) = 0;
  // out = [rank 0's n values, rank 1's n values, ...] on every rank. Enqueued on `stream`.
  virtual Status all_gather(const float* in, int64_t n, float* out, cudaStream_t stream) = 0;
  // Point to point (pipeline stages): `bytes` from this rank to `peer`, which posts the
  // matching recv. Enqueued on `stream`; messages between one pair arrive in order.
  virtual Status send(const void* data, size_t bytes, int peer, cudaStream_t stream) = 0;
  virtual Status recv(void* data, size_t bytes, int peer, cudaStream_t stream) = 0;
  // A peer was lost (another node died): ends this rank's part of the group for good. Any
  // collective blocked on the peer (enqueued or running on the stream) returns, so a stream
  // synchronisation after it returns too, and every later call fails. Safe from any thread,
  // while another thread is inside a collective; idempotent.
  virtual void abort() {}
};

// NCCL's unique id (128 bytes), made by rank 0 and handed to the others (in one process
// directly; across nodes with pdserve/transfer/rank_bootstrap.h).
Result<std::vector<uint8_t>> nccl_unique_id();
// One rank of a group: binds `device` to the calling thread and joins. Blocks until all
// `size` ranks have called it with the same id.
Result<std::unique_ptr<DeviceCommunicator>> nccl_join(int rank, int size, const std::vector<uint8_t>& id, int device);
// This node's share of a group that may span nodes: local index i on device i joins as global
// rank first_rank + i of world_size, all with the one `id` (handed out by node 0 through
// pdserve/transfer/dist_init.h). Returns once every rank of every node has joined.
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> make_nccl_node_group(const std::vector<uint8_t>& id, int world_size,
                                                                               int first_rank, int local_ranks);
// Ranks as threads of this process, rank r on device r: one communicator per rank (each
// joined from its own thread, one unique id). Use rank r's only from a thread bound to device r.
Result<std::vector<std::unique_ptr<DeviceCommunicator>>> make_nccl_group(int size);
// "NCCL 2.x.y from <path>", or why NCCL cannot be loaded.
std::string nccl_describe();

}  // namespace pdserve::cuda
