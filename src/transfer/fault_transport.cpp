#include "pdserve/transfer/fault_transport.h"

#include <cstring>

namespace pdserve::transfer {

namespace {

// Completes as its inner batch does, unless the fault decided otherwise.
class FaultBatch final : public TransferBatch {
 public:
  FaultBatch(RoomId room, uint64_t bytes) : room_(room), bytes_(bytes) {}

  std::optional<Status> poll() const override {
    std::lock_guard lk(mu_);
    if (forced_) return forced_;
    if (lost_ || !inner_) return std::nullopt;
    return inner_->poll();
  }
  Status wait(Clock::time_point deadline) const override {
    std::shared_ptr<TransferBatch> inner;
    {
      std::unique_lock lk(mu_);
      cv_.wait_until(lk, deadline, [&] { return forced_.has_value() || (!lost_ && inner_); });
      if (forced_) return *forced_;
      if (lost_ || !inner_) return Status(ErrorCode::kDeadlineExceeded, "batch for room " + std::to_string(room_) + " not finished by its deadline");
      inner = inner_;
    }
    return inner->wait(deadline);
  }
  RoomId room() const override { return room_; }
  uint64_t bytes() const override { return bytes_; }

  void set_inner(Result<std::shared_ptr<TransferBatch>> r, bool lost) {
    std::lock_guard lk(mu_);
    lost_ = lost;
    if (r.is_ok()) inner_ = std::move(r).value();
    else forced_ = r.status();
    cv_.notify_all();
  }
  void set_lost() {
    std::lock_guard lk(mu_);
    lost_ = true;
  }
  void force(Status st) {
    std::lock_guard lk(mu_);
    forced_ = std::move(st);
    cv_.notify_all();
  }

 private:
  RoomId room_;
  uint64_t bytes_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::shared_ptr<TransferBatch> inner_;
  std::optional<Status> forced_;
  bool lost_ = false;
};

uint64_t total_bytes(const BatchRequest& r) {
  uint64_t n = 0;
  for (const auto& w : r.writes) n += w.length;
  return n;
}

}  // namespace

FaultInjectingTransport::~FaultInjectingTransport() { shutdown(); }

void FaultInjectingTransport::set_plan(const FaultPlan& plan) {
  std::lock_guard lk(mu_);
  plan_ = plan;
  bytes_passed_ = 0;
}

TransportCaps FaultInjectingTransport::capabilities() const {
  TransportCaps c = inner_->capabilities();
  c.name = "fault(" + c.name + ")";
  return c;
}

Status FaultInjectingTransport::register_region(const MemoryRegion& region) {
  if (region.id >= kScratchRegionBase) return invalid_argument("region ids from " + std::to_string(kScratchRegionBase) + " are reserved by the fault wrapper");
  PDS_RETURN_IF_ERROR(inner_->register_region(region));
  std::lock_guard lk(mu_);
  regions_[region.id] = region;
  return Status::ok();
}

Status FaultInjectingTransport::unregister_region(RegionId id) {
  PDS_RETURN_IF_ERROR(inner_->unregister_region(id));
  std::lock_guard lk(mu_);
  regions_.erase(id);
  return Status::ok();
}

Result<PeerId> FaultInjectingTransport::open_peer(const PeerAddress& address) {
  PDS_ASSIGN_OR_RETURN(PeerId id, inner_->open_peer(address));
  std::lock_guard lk(mu_);
  cut_peers_.erase(id);
  return id;
}

Status FaultInjectingTransport::close_peer(PeerId peer) {
  {
    std::lock_guard lk(mu_);
    cut_peers_.erase(peer);
  }
  return inner_->close_peer(peer);
}

Result<WriteOp> FaultInjectingTransport::corrupted_copy(const WriteOp& w, uint64_t byte) {
  auto it = regions_.find(w.local_region);
  if (it == regions_.end() || w.local_offset + w.length > it->second.size) return invalid_argument("fault wrapper: bad source for corruption");
  auto copy = std::make_unique<uint8_t[]>(w.length);
  std::memcpy(copy.get(), static_cast<uint8_t*>(it->second.base) + w.local_offset, w.length);
  copy[byte % w.length] ^= 0x5a;
  MemoryRegion r{next_scratch_++, copy.get(), w.length, "fault-scratch"};
  PDS_RETURN_IF_ERROR(inner_->register_region(r));
  scratch_.push_back(std::move(copy));
  WriteOp out = w;
  out.local_region = r.id;
  out.local_offset = 0;
  return out;
}

Result<std::shared_ptr<TransferBatch>> FaultInjectingTransport::cut_after(PeerId peer, const BatchRequest& req, uint64_t budget) {
  // Send exactly `budget` more bytes, then cut the session under the batch.
  BatchRequest prefix{req.room, req.generation, {}, std::nullopt};
  for (const WriteOp& w : req.writes) {
    if (budget == 0) break;
    WriteOp part = w;
    part.length = std::min(w.length, budget);
    budget -= part.length;
    prefix.writes.push_back(part);
  }
  if (!prefix.writes.empty()) {
    auto sent = inner_->submit(peer, prefix);
    if (sent.is_ok()) (void)(*sent)->wait(Clock::now() + std::chrono::seconds(30));
  }
  {
    std::lock_guard lk(mu_);
    cut_peers_.insert(peer);
  }
  (void)inner_->close_peer(peer);
  auto b = std::make_shared<FaultBatch>(req.room, total_bytes(req));
  b->force(Status(ErrorCode::kUnavailable, "fault: session cut after the planned number of bytes"));
  return std::shared_ptr<TransferBatch>(b);
}

Result<std::shared_ptr<TransferBatch>> FaultInjectingTransport::submit(PeerId peer, const BatchRequest& req) {
  BatchRequest out = req;
  bool lost = false;
  std::optional<uint64_t> cut_budget;
  std::chrono::milliseconds delay{0};
  {
    std::lock_guard lk(mu_);
    if (cut_peers_.count(peer)) return Status(ErrorCode::kUnavailable, "fault: session to peer " + std::to_string(peer) + " was cut");
    if (plan_.disconnect_after_bytes) {
      const uint64_t budget = *plan_.disconnect_after_bytes - std::min(*plan_.disconnect_after_bytes, bytes_passed_);
      const uint64_t n = total_bytes(req);
      if (n > budget) {
        cut_budget = budget;
        plan_.disconnect_after_bytes.reset();
      }
      bytes_passed_ += std::min(n, budget);
    }
    if (!cut_budget && plan_.drop_next_write && !out.writes.empty()) {
      plan_.drop_next_write = false;
      out.writes.erase(out.writes.begin());
      out.notify.reset();  // the receiver must never hear "done" for a batch that lost data
      lost = true;
    }
    if (!cut_budget && plan_.corrupt_byte && !out.writes.empty()) {
      const int64_t n = static_cast<int64_t>(out.writes.size());
      const int64_t i = plan_.corrupt_write < 0 ? n + plan_.corrupt_write : plan_.corrupt_write;
      if (i < 0 || i >= n) return invalid_argument("fault wrapper: corrupt_write out of range for this batch");
      PDS_ASSIGN_OR_RETURN(out.writes[static_cast<size_t>(i)], corrupted_copy(out.writes[static_cast<size_t>(i)], *plan_.corrupt_byte));
      plan_.corrupt_byte.reset();
    }
    delay = plan_.delay;
  }
  if (cut_budget) return cut_after(peer, req, *cut_budget);
  auto b = std::make_shared<FaultBatch>(req.room, total_bytes(req));
  if (delay.count() == 0) {
    if (lost && out.writes.empty()) b->set_lost();
    else b->set_inner(inner_->submit(peer, out), lost);
    return std::shared_ptr<TransferBatch>(b);
  }
  std::lock_guard lk(mu_);
  delayers_.emplace_back([this, b, peer, out, lost, delay] {
    {
      std::unique_lock dl(mu_);
      if (stop_cv_.wait_for(dl, delay, [&] { return stopping_; })) {
        b->force(Status(ErrorCode::kAborted, "fault wrapper shut down"));
        return;
      }
    }
    if (lost && out.writes.empty()) b->set_lost();
    else b->set_inner(inner_->submit(peer, out), lost);
  });
  return std::shared_ptr<TransferBatch>(b);
}

void FaultInjectingTransport::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    threads.swap(delayers_);
  }
  stop_cv_.notify_all();
  for (auto& t : threads) t.join();
  inner_->shutdown();
}

}  // namespace pdserve::transfer
