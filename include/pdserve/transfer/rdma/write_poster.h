// Sending side of the RDMA data path for one peer: turns a batch's stripe plan into RDMA
// WRITEs on that peer's send queues (one per NIC), keeps at most max_outstanding work
// requests posted per queue, and finishes the batch from completions.
//
// - Checks before anything is posted: every piece lies inside the local memory region and
//   the peer's, and inside the grants the peer made for the room under its generation (one-
//   sided writes bypass the receiver's CPU, so the sender is where a grant is enforced).
// - The batch's completion write (the notification, a write-with-immediate) is posted only
//   after every data write of the batch completed: an RC completion means the bytes were
//   placed in the peer's memory, and the writes of other NICs are not ordered with it.
// - A completion with an error (or a refused post) moves that queue's connection to error
//   (conn_state.h): every batch with work on it fails, and the whole peer refuses new
//   batches (kUnavailable) until the peer announced itself again and every queue in error
//   was replaced by a fresh connected one (reconnect()).
// - A room's notification also waits for every earlier batch of that room (to this peer) to
//   finish, as on the TCP transport; when one fails, later batches of the room that have not
//   notified yet fail too (kAborted), so a room never reports success over a failed batch.
//
// progress(lane) is what lane's completion thread calls; nothing here starts threads.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <unordered_map>
#include <vector>

#include "pdserve/transfer/access_table.h"
#include "pdserve/transfer/rdma/conn_state.h"
#include "pdserve/transfer/rdma/send_queue.h"
#include "pdserve/transfer/rdma/stripe_plan.h"
#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

// A registered region as one side sees it: its address and its key on each NIC.
struct MrKeys {
  uint64_t addr = 0;
  uint64_t size = 0;
  std::vector<uint32_t> keys;  // lkey (local) or rkey (remote), indexed by NIC
};

struct PeerKeys {
  std::unordered_map<RegionId, MrKeys> local;   // ours
  std::unordered_map<RegionId, MrKeys> remote;  // the peer's, from the connection exchange
};

class RdmaBatch final : public TransferBatch {
 public:
  std::optional<Status> poll() const override;
  Status wait(Clock::time_point deadline) const override;
  RoomId room() const override { return room_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  friend class WritePoster;
  void publish(Status st);
  RoomId room_ = 0;
  Generation gen_ = 0;
  uint64_t bytes_ = 0;
  int tag_ = -1;                 // the caller's (the transport's notification slot)
  Clock::time_point submitted_;
  // Guarded by the poster's mutex.
  std::vector<Pin> pins_;        // source ranges stay registered until the batch finishes
  int remaining_ = 0;                    // data writes not yet completed
  std::optional<RdmaWrite> completion_;  // posted on lane 0 once remaining_ is 0
  int completion_lane_ = 0;
  bool data_done_ = false;               // every data write completed; completion_ may go
  bool done_ = false;
  // Guarded by mu_.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<Status> final_;
};

class WritePoster {
 public:
  // lanes: connected queues, one per NIC (their QPs reached RTS).
  WritePoster(std::vector<SendQueue*> lanes, PeerKeys keys, int max_outstanding);

  // plan: the batch's data writes (plan_stripes over as many NICs as lanes). grants: what the
  // peer granted the room (under req_gen). completion: the final write-with-immediate, or
  // nullopt for a batch without notification. kInvalidArgument for a write outside a region
  // or a grant; kUnavailable while the peer is blocked.
  Result<std::shared_ptr<TransferBatch>> submit(RoomId room, Generation gen, const StripePlan& plan,
                                                const std::vector<Grant>& grants, std::optional<WriteOp> completion, uint32_t imm,
                                                std::vector<Pin> pins = {}, int tag = -1);
  // Called under the poster's lock as each batch finishes (keep it short: counters).
  using FinishHook = std::function<void(int tag, RoomId room, Generation gen, const Status& st, uint64_t bytes, Clock::time_point submitted)>;
  void set_finish_hook(FinishHook hook);
  // Returns once no batch of the room is in flight here (the revoke handshake's wait).
  void wait_room_idle(RoomId room);
  Status blocked() const;  // not ok while new batches are refused
  // Polls lane's completions once and applies them; their count.
  int progress(int lane);
  // The peer re-registered and `fresh` is a new connected queue for a lane in error. The
  // peer takes new batches again once no lane is in error.
  Status reconnect(int lane, SendQueue* fresh);
  // Fails everything in flight and refuses new work (close_peer / shutdown).
  void close(const Status& why);
  ConnState lane_state(int lane) const;
  size_t posted(int lane) const;  // outstanding work requests now

 private:
  struct Lane {
    SendQueue* queue = nullptr;
    ConnLifecycle conn;
    std::deque<std::pair<std::shared_ptr<RdmaBatch>, RdmaWrite>> waiting;
    std::unordered_map<uint64_t, std::shared_ptr<RdmaBatch>> posted;
  };
  Result<RdmaWrite> to_wr(const WriteOp& op, int lane) const;
  void pump_locked(int lane);
  void lane_error_locked(int lane, const Status& why);
  void finish_locked(const std::shared_ptr<RdmaBatch>& b, Status st);
  void release_completions_locked();

  PeerKeys keys_;
  int max_outstanding_;
  mutable std::mutex mu_;
  std::vector<Lane> lanes_;
  uint64_t next_wr_id_ = 1;
  Status blocked_;
  FinishHook on_finish_;
  std::unordered_map<RoomId, int> room_inflight_;
  std::deque<std::shared_ptr<RdmaBatch>> order_;  // unfinished batches, in submission order
  std::condition_variable room_idle_;  // not ok: why new batches are refused
};

}  // namespace pdserve::transfer::rdma
