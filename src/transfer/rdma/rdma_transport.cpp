#include "pdserve/transfer/rdma/rdma_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <list>
#include <map>
#include <random>

#include "rdma_inbound.h"
#include "rdma_peer.h"

namespace pdserve::transfer::rdma {

Status RdmaTransportConfig::validate() const {
  PDS_RETURN_IF_ERROR(control.validate());
  PDS_RETURN_IF_ERROR(rdma.validate());
  if (notify_slots < 1 || notify_slots > 4096) return invalid_argument("notify_slots must be 1..4096");
  if (control.limits.max_notify_bytes + 32 > control::kMaxControlBytes) return invalid_argument("limits.max_notify_bytes is too large for a ring slot");
  return Status::ok();
}

namespace {

class RdmaTransport final : public Transport {
 public:
  RdmaTransport(const RdmaTransportConfig& cfg, std::unique_ptr<Fabric> fabric, uint64_t instance_id)
      : cfg_(cfg), fabric_(std::move(fabric)), instance_id_(instance_id), pollers_(fabric_->nics()) {}
  ~RdmaTransport() override { shutdown(); }

  Status start() {
    PDS_ASSIGN_OR_RETURN(listen_fd_, net::listen_tcp(cfg_.control.listen_host, cfg_.control.listen_port, &port_));
    accept_thread_ = std::thread([this] { accept_loop(); });
    spdlog::info("transfer(rdma): {} — NEVER RUN ON A REAL NIC (tested over a fake fabric only)", fabric_->describe());
    return Status::ok();
  }

  TransportCaps capabilities() const override {
    TransportCaps c;
    c.name = "rdma";
    c.host_memory = true;
    c.gpu_memory = fabric_->gpu_registration().is_ok();  // dma-buf or nvidia-peermem (gpu_registration.h)
    c.max_streams = fabric_->nics();
    c.zero_copy = true;
    c.receiver_checks_each_write = false;  // one-sided: the sender checks against pushed grants
    c.notify_slots = cfg_.notify_slots;
    return c;
  }
  PeerAddress local_address() const override { return {cfg_.control.listen_host, port_}; }

  Status register_region(const MemoryRegion& r) override {
    if (r.id >= kFirstReservedRegion) return invalid_argument("region ids from " + std::to_string(kFirstReservedRegion) + " are the rdma transport's");
    if (r.gpu) {
      Result<std::string> how = fabric_->gpu_registration();
      if (!how.is_ok()) return Status(how.status().code(), "GPU region '" + r.name + "': " + how.status().message());
      spdlog::info("transfer(rdma): region '{}': {}", r.name, *how);
    }
    PDS_RETURN_IF_ERROR(access_.register_region(r));
    Result<std::unique_ptr<Registration>> mr = fabric_->register_memory(r);
    if (!mr.is_ok()) {
      (void)access_.unregister_region(r.id);
      return mr.status();
    }
    std::lock_guard lk(mu_);
    mrs_[r.id] = std::move(*mr);
    return Status::ok();
  }
  Status unregister_region(RegionId id) override {
    PDS_RETURN_IF_ERROR(access_.unregister_region(id));  // refused while granted; waits for pinned reads
    std::lock_guard lk(mu_);
    mrs_.erase(id);
    return Status::ok();
  }

  Status grant(const Grant& g) override {
    PDS_RETURN_IF_ERROR(access_.grant(g));
    std::lock_guard lk(mu_);
    grants_[g.room].push_back(g);
    for (auto& in : inbound_)
      if (!in->dead()) (void)in->push_grant(g);  // a lost connection is noticed by its reader
    return Status::ok();
  }

  Status revoke(RoomId room) override {
    PDS_RETURN_IF_ERROR(access_.revoke(room));  // its notifications are refused from here on
    std::vector<RdmaInbound*> senders;
    {
      std::lock_guard lk(mu_);
      grants_.erase(room);
      for (auto& in : inbound_) senders.push_back(in.get());
      ++revoking_;
    }
    for (RdmaInbound* in : senders) in->revoke(room);  // each: nothing of the room in flight, or its QPs dead
    std::lock_guard lk(mu_);
    if (--revoking_ == 0) revokes_done_.notify_all();
    return Status::ok();
  }

  void set_callbacks(ReceiverCallbacks cb) override {
    std::lock_guard lk(cb_mu_);
    callbacks_ = std::move(cb);
  }

  Result<PeerId> open_peer(const PeerAddress& addr) override {
    std::lock_guard lk(peers_mu_);
    if (closed_) return Status(ErrorCode::kUnavailable, "transport is shut down");
    for (auto& [id, p] : peers_) {
      if (p->address().host != addr.host || p->address().port != addr.port) continue;
      if (p->health().is_ok()) return id;
      // A failed session (a QP in error, a lost control connection) is replaced: new QPs,
      // the peer registers afresh. This is the "re-registration" that unblocks the peer.
      p->close();
      peers_.erase(id);
      break;
    }
    PeerEnv env{&cfg_, instance_id_, fabric_.get(), &pollers_, &metrics_, local_keys()};
    PDS_ASSIGN_OR_RETURN(std::unique_ptr<RdmaPeer> peer, RdmaPeer::connect(addr, std::move(env)));
    const PeerId id = next_peer_++;
    peers_[id] = std::move(peer);
    return id;
  }

  Status close_peer(PeerId id) override {
    std::unique_ptr<RdmaPeer> p;
    {
      std::lock_guard lk(peers_mu_);
      auto it = peers_.find(id);
      if (it == peers_.end()) return not_found("no peer " + std::to_string(id));
      p = std::move(it->second);
      peers_.erase(it);
    }
    p->close();
    return Status::ok();
  }

  Result<std::shared_ptr<TransferBatch>> submit(PeerId id, const BatchRequest& req) override {
    PDS_ASSIGN_OR_RETURN(std::vector<Pin> pins, access_.pin_sources(req));
    std::lock_guard lk(peers_mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) return not_found("no peer " + std::to_string(id));
    return it->second->submit(req, std::move(pins));
  }

  Status report_room_failure(PeerId id, RoomId room, Generation generation) override {
    std::lock_guard lk(peers_mu_);
    auto it = peers_.find(id);
    if (it == peers_.end()) return not_found("no peer " + std::to_string(id));
    return it->second->report_room_failure(room, generation);
  }

  MetricsSnapshot metrics() const override { return metrics_.snapshot(); }

  void shutdown() override {
    std::map<PeerId, std::unique_ptr<RdmaPeer>> peers;
    {
      std::lock_guard lk(peers_mu_);
      if (closed_) return;
      closed_ = true;
      peers.swap(peers_);
    }
    for (auto& [id, p] : peers) p->close();
    stopping_.store(true);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<std::unique_ptr<RdmaInbound>> inbound;
    {
      std::unique_lock lk(mu_);
      for (auto& in : inbound_) in->kill();  // a revoke in progress stops waiting for acks
      revokes_done_.wait(lk, [&] { return revoking_ == 0; });  // it holds raw pointers to them
      inbound.swap(inbound_);
    }
    for (auto& in : inbound) in->close();
    pollers_.stop();
    listen_fd_.reset();
  }

 private:
  std::unordered_map<RegionId, MrKeys> local_keys() {
    std::lock_guard lk(mu_);
    std::unordered_map<RegionId, MrKeys> out;
    for (auto& [id, mr] : mrs_) out[id] = mr->keys();
    return out;
  }

  void accept_loop() {
    while (!stopping_.load()) {
      pollfd p{listen_fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        reap();
        continue;
      }
      net::Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      // Set up inline: connections are rare (one per prefill instance and restart).
      InboundEnv env{&cfg_, instance_id_, fabric_.get(), &pollers_, &access_, &metrics_, [this] {
                       std::lock_guard lk(cb_mu_);
                       return callbacks_;
                     }};
      std::vector<RemoteRegion> regions;
      {
        std::lock_guard lk(mu_);
        for (auto& [id, mr] : mrs_) regions.push_back({id, mr->keys().addr, mr->keys().size, mr->rkeys()});
      }
      Result<std::unique_ptr<RdmaInbound>> in = RdmaInbound::accept(std::move(fd), std::move(env), regions, stopping_);
      if (!in.is_ok()) {
        if (in.status().code() == ErrorCode::kInvalidArgument) metrics_.frame_rejected();
        spdlog::warn("transfer(rdma): sender refused: {}", in.status().message());
        continue;
      }
      RdmaInbound* added = in->get();
      {
        std::lock_guard lk(mu_);
        // Every grant made so far, then every later one: the sender never misses a grant.
        for (auto& [room, gs] : grants_)
          for (const Grant& g : gs) (void)added->push_grant(g);
        inbound_.push_back(std::move(*in));
      }
      added->start();  // outside mu_: its threads call back into code that takes it
    }
  }

  // Drops sessions whose senders went away (their QPs are already in error).
  void reap() {
    std::list<std::unique_ptr<RdmaInbound>> gone;
    {
      std::lock_guard lk(mu_);
      if (revoking_) return;  // a revoke holds raw pointers to them
      for (auto it = inbound_.begin(); it != inbound_.end();) {
        if ((*it)->dead()) {
          gone.push_back(std::move(*it));
          it = inbound_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& in : gone) in->close();
  }

  RdmaTransportConfig cfg_;
  std::unique_ptr<Fabric> fabric_;
  uint64_t instance_id_;
  NicPollers pollers_;
  TransferMetrics metrics_;
  AccessTable access_;
  net::Fd listen_fd_;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;  // mrs_, grants_, inbound_, revoking_
  std::unordered_map<RegionId, std::unique_ptr<Registration>> mrs_;
  std::unordered_map<RoomId, std::vector<Grant>> grants_;
  std::list<std::unique_ptr<RdmaInbound>> inbound_;
  int revoking_ = 0;
  std::condition_variable revokes_done_;

  std::mutex cb_mu_;
  ReceiverCallbacks callbacks_;

  std::mutex peers_mu_;
  std::map<PeerId, std::unique_ptr<RdmaPeer>> peers_;
  PeerId next_peer_ = 1;
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> make_rdma_transport(const RdmaTransportConfig& config, std::unique_ptr<Fabric> fabric) {
  PDS_RETURN_IF_ERROR(config.validate());
  if (!fabric || fabric->nics() < 1) return invalid_argument("the rdma transport needs a fabric with at least one NIC");
  std::random_device rd;
  const uint64_t instance_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  auto t = std::make_unique<RdmaTransport>(config, std::move(fabric), instance_id);
  PDS_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace pdserve::transfer::rdma
