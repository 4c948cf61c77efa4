// Receiving half of the RDMA transport (internal): one accepted control connection from one
// sender, with a queue pair per NIC and a notification ring. Data lands without this side's
// CPU; what runs here is the setup, the grant / revoke traffic, and the ring: each
// write-with-immediate names a slot, whose notification is checked and delivered.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "../socket_io.h"
#include "control_channel.h"
#include "nic_pollers.h"
#include "pdserve/transfer/access_table.h"
#include "pdserve/transfer/metrics.h"
#include "pdserve/transfer/rdma/rdma_transport.h"

namespace pdserve::transfer::rdma {

struct InboundEnv {
  const RdmaTransportConfig* cfg = nullptr;
  uint64_t instance_id = 0;
  Fabric* fabric = nullptr;
  NicPollers* pollers = nullptr;
  AccessTable* access = nullptr;
  TransferMetrics* metrics = nullptr;
  std::function<ReceiverCallbacks()> callbacks;
};

class RdmaInbound {
 public:
  // Handshake, connection info both ways (regions: this side's, with their rkeys), queue
  // pairs connected, ring registered and its receives posted. Grants are sent by the caller.
  static Result<std::unique_ptr<RdmaInbound>> accept(net::Fd fd, InboundEnv env, const std::vector<RemoteRegion>& regions,
                                                     const std::atomic<bool>& stopping);
  ~RdmaInbound() { close(); }

  void start();  // the control reader and the NICs' ring pollers
  Status push_grant(const Grant& g) { return writer_->send(control::Type::kGrant, control::encode_grant(g)); }
  // Asks the sender to drop the room's grants and waits until it says nothing of the room is
  // in flight. If it cannot say so in time (or the connection is gone), this side's queue
  // pairs go to error, so no late byte can land.
  void revoke(RoomId room);
  bool dead() const { return dead_.load(); }
  // Queue pairs to error at once (shutdown): nothing more lands, revokes stop waiting.
  void kill() { kill_qps("shutting down"); }
  void close();

 private:
  explicit RdmaInbound(InboundEnv env) : env_(std::move(env)) {}
  void control_loop();
  int poll_ring(int nic);
  void deliver(uint32_t slot);
  void refuse(RoomId room, const Status& why);
  void kill_qps(const std::string& why);

  InboundEnv env_;
  std::string where_;
  net::Fd fd_;
  std::unique_ptr<control::Writer> writer_;
  std::vector<std::unique_ptr<QueuePair>> qps_;
  std::vector<uint8_t> ring_;
  std::unique_ptr<Registration> ring_mr_;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  std::vector<uint64_t> poller_ids_;
  std::thread reader_;
  std::atomic<bool> stopping_{false}, dead_{false}, closed_{false};

  std::mutex mu_;  // revoke tokens
  std::condition_variable acked_;
  std::set<uint64_t> acks_;
  uint64_t next_token_ = 1;
};

}  // namespace pdserve::transfer::rdma
