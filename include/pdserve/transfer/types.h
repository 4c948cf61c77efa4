// Plain data shared by every transport: regions, writes, grants, capabilities, and the
// abstract batch handle. Nothing here knows about a particular transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::transfer {

using RegionId = uint32_t;
using RoomId = uint64_t;     // the bootstrap room: one request's transfer
using PeerId = uint32_t;
using Generation = uint32_t; // bumped by decode each time it reuses a page / slot / aux row
using Clock = std::chrono::steady_clock;

// Memory the caller owns; the transport only reads (sender) or writes (receiver) it.
struct MemoryRegion {
  RegionId id = 0;
  void* base = nullptr;
  uint64_t size = 0;
  std::string name;        // for logs: "mla_pages", "kda_state", "aux"
  bool gpu = false;        // TCP moves host memory only; RDMA may accept GPU memory
};

// One write: length bytes from local (region, offset) to the peer's (region, offset).
struct WriteOp {
  RegionId local_region = 0;
  uint64_t local_offset = 0;
  RegionId remote_region = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

// Writes for one room, optionally ending with a notification that the receiver sees only
// after every write of this batch (and of earlier batches of the room to that peer) landed.
struct BatchRequest {
  RoomId room = 0;
  Generation generation = 0;          // the generation decode granted the room's ranges under
  std::vector<WriteOp> writes;
  std::optional<std::string> notify;  // small: an aux row or "room done"
};

// Receiver side: room may write [offset, offset + length) of region under generation.
struct Grant {
  RoomId room = 0;
  RegionId region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  Generation generation = 0;
};

struct TransportCaps {
  std::string name;             // "tcp", "rdma", "fault(tcp)"
  bool host_memory = false;
  bool gpu_memory = false;
  int max_streams = 1;          // parallel connections / NICs one peer can use
  bool zero_copy = false;       // payload moves without a bounce buffer on either side
  bool receiver_checks_each_write = false;  // two-sided: the receiver validates every write
  int notify_slots = 0;         // rdma: the receiver's notification ring slots per sender
};

// Called on transport threads; keep them short (hand work to a queue).
struct ReceiverCallbacks {
  std::function<void(RoomId, const std::string& payload)> on_notify;
  std::function<void(RoomId, const Status& why)> on_room_failed;  // once per room
};

// A submitted batch. Each transport has its own concrete type behind this handle.
class TransferBatch {
 public:
  virtual ~TransferBatch() = default;
  // nullopt while in flight, else the final status.
  virtual std::optional<Status> poll() const = 0;
  // The final status, or kDeadlineExceeded (the batch stays in flight; close the peer to
  // abandon it: after close_peer returns no byte of it is read again).
  virtual Status wait(Clock::time_point deadline) const = 0;
  virtual RoomId room() const = 0;
  virtual uint64_t bytes() const = 0;   // sum of write lengths
};

}  // namespace pdserve::transfer
