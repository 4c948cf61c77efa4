// Sending half of the RDMA transport (internal): one session to one decode instance. The
// control connection (authenticated hello, then connection info, grants, revokes, credits),
// one queue pair per NIC, the write poster over them, and decode's notification ring slots.
#pragma once

#include <atomic>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../socket_io.h"
#include "control_channel.h"
#include "nic_pollers.h"
#include "pdserve/transfer/metrics.h"
#include "pdserve/transfer/rdma/rdma_transport.h"

namespace pdserve::transfer::rdma {

struct PeerEnv {
  const RdmaTransportConfig* cfg = nullptr;
  uint64_t instance_id = 0;
  Fabric* fabric = nullptr;
  NicPollers* pollers = nullptr;
  TransferMetrics* metrics = nullptr;
  std::unordered_map<RegionId, MrKeys> local;  // this side's registered regions
};

class RdmaPeer {
 public:
  static Result<std::unique_ptr<RdmaPeer>> connect(const PeerAddress& addr, PeerEnv env);
  ~RdmaPeer() { close(); }

  // pins[i] is the pinned source of req.writes[i] (checked by the caller).
  Result<std::shared_ptr<TransferBatch>> submit(const BatchRequest& req, std::vector<Pin> pins);
  // kRoomFailed on the control connection: needs no notification slot or batch credit.
  Status report_room_failure(RoomId room, Generation generation);
  // Fails what is in flight and stops the threads; afterwards no source byte is read again.
  void close();
  // Not ok once the control connection or a queue pair failed: the session must be replaced.
  Status health() const;
  const PeerAddress& address() const { return addr_; }

 private:
  RdmaPeer(const PeerAddress& addr, PeerEnv env) : addr_(addr), env_(std::move(env)) {}
  Status setup();
  void control_loop();
  void free_slot(int slot);
  void report_failures();  // tells decode of rooms whose batches failed here (kRoomFailed)
  // One round trip on the control connection: afterwards every grant decode made before the
  // caller heard of the room has arrived (decode told prefill of the room after granting).
  Status sync_grants();

  PeerAddress addr_;
  PeerEnv env_;
  net::Fd fd_;
  std::unique_ptr<control::Writer> writer_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
  std::unique_ptr<WritePoster> poster_;
  std::vector<uint64_t> poller_ids_;
  std::vector<uint8_t> staging_;
  std::unique_ptr<Registration> staging_mr_;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  std::thread reader_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> inflight_{0};

  mutable std::mutex mu_;  // grants_, control_failed_, closed_; held across poster submit
  std::unordered_map<RoomId, std::vector<Grant>> grants_;
  // Rooms whose first submit synced: every grant decode made for them is in grants_. Having
  // some grant of a room is not enough: its grants arrive one by one (pages, state, aux).
  std::unordered_set<RoomId> rooms_synced_;
  Status control_failed_;
  bool closed_ = false;

  std::condition_variable synced_;  // with mu_
  std::set<uint64_t> sync_acks_;
  uint64_t next_sync_ = 1;

  std::mutex failed_mu_;  // taken inside the poster's finish hook; never held while sending
  std::vector<std::pair<RoomId, Generation>> failed_rooms_;

  std::mutex slots_mu_;  // never held while calling the poster
  std::vector<bool> slot_busy_;
  std::vector<int> free_slots_;
};

}  // namespace pdserve::transfer::rdma
