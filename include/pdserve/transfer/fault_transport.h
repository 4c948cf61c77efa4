// A decorator that injects faults into any transport, for tests: a lost write, a delay, a
// corrupted byte in flight, a connection cut after N bytes. Everything else passes through,
// so the code under test runs against the real transport underneath.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "pdserve/transfer/transport.h"

namespace pdserve::transfer {

struct FaultPlan {
  // The next batch loses its first write: the rest moves, the batch never completes (its
  // waiter sees kDeadlineExceeded) and its notification is never sent, as on a lossy link.
  bool drop_next_write = false;
  // Every batch reaches the real transport this late.
  std::chrono::milliseconds delay{0};
  // The next write arrives with byte `corrupt_byte` (inside that write) flipped; the
  // transport reports success, as a bit flip on a NIC would. The source is not touched.
  std::optional<uint64_t> corrupt_byte;
  // Which write of that batch: 0 the first, -1 the last (e.g. an aux row), -2 the one before.
  int64_t corrupt_write = 0;
  // After this many payload bytes (counted over all batches) the session to the peer is
  // cut: that batch and every later one fail with kUnavailable.
  std::optional<uint64_t> disconnect_after_bytes;
};

class FaultInjectingTransport final : public Transport {
 public:
  explicit FaultInjectingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  ~FaultInjectingTransport() override;

  void set_plan(const FaultPlan& plan);
  Transport& inner() { return *inner_; }

  TransportCaps capabilities() const override;
  PeerAddress local_address() const override { return inner_->local_address(); }
  Status register_region(const MemoryRegion& region) override;
  Status unregister_region(RegionId id) override;
  Status grant(const Grant& g) override { return inner_->grant(g); }
  Status revoke(RoomId room) override { return inner_->revoke(room); }
  void set_callbacks(ReceiverCallbacks cb) override { inner_->set_callbacks(std::move(cb)); }
  Result<PeerId> open_peer(const PeerAddress& address) override;
  Status close_peer(PeerId peer) override;
  Result<std::shared_ptr<TransferBatch>> submit(PeerId peer, const BatchRequest& batch) override;
  Status report_room_failure(PeerId peer, RoomId room, Generation generation) override {
    return inner_->report_room_failure(peer, room, generation);
  }
  MetricsSnapshot metrics() const override { return inner_->metrics(); }
  void shutdown() override;

  // Region ids at and above this are the wrapper's scratch copies for corrupted writes.
  static constexpr RegionId kScratchRegionBase = 0xFFFF0000u;

 private:
  Result<WriteOp> corrupted_copy(const WriteOp& w, uint64_t byte);
  Result<std::shared_ptr<TransferBatch>> cut_after(PeerId peer, const BatchRequest& req, uint64_t budget);

  std::unique_ptr<Transport> inner_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  FaultPlan plan_;
  uint64_t bytes_passed_ = 0;
  std::map<RegionId, MemoryRegion> regions_;        // to read sources for corrupted copies
  std::vector<std::unique_ptr<uint8_t[]>> scratch_;  // live as long as the wrapper
  RegionId next_scratch_ = kScratchRegionBase;
  std::set<PeerId> cut_peers_;
  std::vector<std::thread> delayers_;
};

}  // namespace pdserve::transfer
