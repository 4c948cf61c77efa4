#include "pdserve/transfer/tcp_transport.h"

#include <map>
#include <random>

#include "tcp_peer.h"
#include "tcp_receiver.h"

namespace pdserve::transfer {

Status TcpConfig::validate() const {
  if (streams_per_peer < 1 || streams_per_peer > 64) return invalid_argument("streams_per_peer must be 1..64, got " + std::to_string(streams_per_peer));
  if (max_outstanding_batches < 1) return invalid_argument("max_outstanding_batches must be at least 1");
  if (min_stripe_bytes == 0) return invalid_argument("min_stripe_bytes must be positive");
  if (limits.max_write_bytes == 0) return invalid_argument("limits.max_write_bytes must be positive");
  if (connect_timeout.count() <= 0 || io_timeout.count() <= 0) return invalid_argument("timeouts must be positive");
  return Status::ok();
}

namespace {

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TcpConfig& cfg, uint64_t instance_id) : cfg_(cfg), instance_id_(instance_id), receiver_(cfg, instance_id, &access_, &metrics_) {}
  ~TcpTransport() override { shutdown(); }

  Status start() { return receiver_.start(); }

  TransportCaps capabilities() const override {
    TransportCaps c;
    c.name = "tcp";
    c.host_memory = true;
    c.gpu_memory = false;
    c.max_streams = cfg_.streams_per_peer;
    c.zero_copy = true;  // sendmsg from the source, recv into the destination
    c.receiver_checks_each_write = true;
    return c;
  }
  PeerAddress local_address() const override { return {cfg_.listen_host, receiver_.port()}; }

  Status register_region(const MemoryRegion& r) override {
    if (r.gpu) return unsupported("the tcp transport moves host memory only; region '" + r.name + "' is GPU memory");
    return access_.register_region(r);
  }
  Status unregister_region(RegionId id) override { return access_.unregister_region(id); }
  Status grant(const Grant& g) override { return access_.grant(g); }
  Status revoke(RoomId room) override { return access_.revoke(room); }
  void set_callbacks(ReceiverCallbacks cb) override { receiver_.set_callbacks(std::move(cb)); }

  Result<PeerId> open_peer(const PeerAddress& addr) override {
    std::lock_guard lk(mu_);
    if (closed_) return Status(ErrorCode::kUnavailable, "transport is shut down");
    for (auto& [id, p] : peers_) {
      if (p->address().host != addr.host || p->address().port != addr.port) continue;
      if (p->health().is_ok()) return id;
      p->close();  // a failed session is replaced, never silently reused
      peers_.erase(id);
      break;
    }
    PDS_ASSIGN_OR_RETURN(std::unique_ptr<TcpPeer> peer, TcpPeer::connect(addr, cfg_, instance_id_, &metrics_));
    const PeerId id = next_peer_++;
    peers_[id] = std::move(peer);
    return id;
  }

  Status close_peer(PeerId id) override {
    std::unique_ptr<TcpPeer> p;
    {
      std::lock_guard lk(mu_);
      auto it = peers_.find(id);
      if (it == peers_.end()) return not_found("no peer " + std::to_string(id));
      p = std::move(it->second);
      peers_.erase(it);
    }
    p->close();
    return Status::ok();
  }

  Result<std::shared_ptr<TransferBatch>> submit(PeerId id, const BatchRequest& req) override {
    if (req.notify && req.notify->size() > cfg_.limits.max_notify_bytes)
      return invalid_argument("notification of " + std::to_string(req.notify->size()) + " bytes exceeds " +
                              std::to_string(cfg_.limits.max_notify_bytes));
    PDS_ASSIGN_OR_RETURN(std::vector<Pin> srcs, access_.pin_sources(req));
    std::lock_guard lk(mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) return not_found("no peer " + std::to_string(id));
    return it->second->submit(req, std::move(srcs));
  }

  MetricsSnapshot metrics() const override { return metrics_.snapshot(); }

  void shutdown() override {
    std::map<PeerId, std::unique_ptr<TcpPeer>> peers;
    {
      std::lock_guard lk(mu_);
      closed_ = true;
      peers.swap(peers_);
    }
    for (auto& [id, p] : peers) p->close();
    receiver_.stop();
  }

 private:
  TcpConfig cfg_;
  uint64_t instance_id_;
  TransferMetrics metrics_;
  AccessTable access_;
  TcpReceiver receiver_;
  std::mutex mu_;
  std::map<PeerId, std::unique_ptr<TcpPeer>> peers_;
  PeerId next_peer_ = 1;
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config) {
  PDS_RETURN_IF_ERROR(config.validate());
  // A fresh id per process lets a peer notice that it talks to a restarted instance.
  std::random_device rd;
  const uint64_t instance_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  auto t = std::make_unique<TcpTransport>(config, instance_id);
  PDS_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace pdserve::transfer
