#include "rdma_peer.h"

#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include "../handshake.h"
#include "notify_slot.h"
#include "pdserve/transfer/rdma/stripe_plan.h"

namespace pdserve::transfer::rdma {

namespace {
Status unavailable(std::string m) { return Status(ErrorCode::kUnavailable, std::move(m)); }

Result<control::Message> expect(int fd, control::Type type, const std::atomic<bool>& stop, const std::string& where) {
  PDS_ASSIGN_OR_RETURN(control::Message m, control::receive(fd, stop));
  if (m.type != type) return data_loss("rdma control from " + where + ": unexpected message type " + std::to_string(static_cast<int>(m.type)));
  return m;
}
}  // namespace

Result<std::unique_ptr<RdmaPeer>> RdmaPeer::connect(const PeerAddress& addr, PeerEnv env) {
  std::unique_ptr<RdmaPeer> p(new RdmaPeer(addr, std::move(env)));
  if (Status st = p->setup(); !st.is_ok()) {
    p->close();
    return st;
  }
  return p;
}

Status RdmaPeer::setup() {
  const RdmaTransportConfig& cfg = *env_.cfg;
  const std::string where = addr_.to_string();
  PDS_ASSIGN_OR_RETURN(fd_, net::connect_tcp(addr_.host, addr_.port, cfg.control.connect_timeout));
  const int fd = fd_.get();
  PDS_RETURN_IF_ERROR(net::tune(fd, cfg.control.io_timeout));
  PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.control.connect_timeout));
  // The cluster secret gates everything below: no RDMA detail is sent to an unproven peer.
  PDS_RETURN_IF_ERROR(handshake::as_sender(fd, cfg.control, env_.instance_id, 0, where).status());
  writer_ = std::make_unique<control::Writer>(fd);

  const int nics = env_.fabric->nics();
  ConnInfo mine;
  for (int n = 0; n < nics; ++n) {
    PDS_ASSIGN_OR_RETURN(std::unique_ptr<QueuePair> qp, env_.fabric->create_qp(n, cfg.rdma.max_outstanding_wrs + 1, 0));
    mine.nics.push_back(qp->endpoint());
    qps_.push_back(std::move(qp));
  }
  PDS_RETURN_IF_ERROR(writer_->send(control::Type::kConnInfo, encode_conn_info(mine)));
  PDS_ASSIGN_OR_RETURN(control::Message info_msg, expect(fd, control::Type::kConnInfo, stopping_, where));
  PDS_ASSIGN_OR_RETURN(ConnInfo theirs, decode_conn_info(info_msg.payload));
  if (static_cast<int>(theirs.nics.size()) != nics)
    return unavailable("rdma peer " + where + " uses " + std::to_string(theirs.nics.size()) + " NICs, this side " + std::to_string(nics) +
                       " (configure the same --rdma-nics count on both roles)");
  PDS_ASSIGN_OR_RETURN(control::Message ring_msg, expect(fd, control::Type::kRing, stopping_, where));
  control::Reader rr{ring_msg.payload};
  slots_ = static_cast<uint32_t>(rr.get(4));
  slot_bytes_ = rr.get(4);
  if (!rr.done() || slots_ == 0 || slots_ > 4096 || slot_bytes_ <= kNotifyHeaderBytes || slot_bytes_ > control::kMaxControlBytes)
    return data_loss("rdma control from " + where + ": bad notification ring description");

  PeerKeys keys;
  keys.local = env_.local;
  for (const RemoteRegion& r : theirs.regions) keys.remote[r.id] = MrKeys{r.addr, r.size, r.rkeys};
  auto ring = keys.remote.find(kNotifyRingRegion);
  if (ring == keys.remote.end() || ring->second.size < uint64_t{slots_} * slot_bytes_)
    return data_loss("rdma control from " + where + ": no notification ring of " + std::to_string(slots_) + " slots");
  staging_.assign(uint64_t{slots_} * slot_bytes_, 0);
  PDS_ASSIGN_OR_RETURN(staging_mr_, env_.fabric->register_memory({kNotifyStagingRegion, staging_.data(), staging_.size(), "notify_staging"}));
  keys.local[kNotifyStagingRegion] = staging_mr_->keys();
  for (int n = 0; n < nics; ++n) PDS_RETURN_IF_ERROR(qps_[n]->connect(theirs.nics[n]).with_context("NIC " + std::to_string(n) + " to " + where));
  PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.control.io_timeout));

  slot_busy_.assign(slots_, false);
  for (int s = static_cast<int>(slots_) - 1; s >= 0; --s) free_slots_.push_back(s);
  std::vector<SendQueue*> lanes;
  for (auto& q : qps_) lanes.push_back(q.get());
  poster_ = std::make_unique<WritePoster>(lanes, std::move(keys), cfg.rdma.max_outstanding_wrs);
  poster_->set_finish_hook([this](int slot, RoomId room, Generation gen, const Status& st, uint64_t bytes, Clock::time_point submitted) {
    env_.metrics->batch_finished(st.is_ok(), bytes, submitted);
    inflight_--;
    if (!st.is_ok() && slot >= 0) free_slot(slot);  // no credit will come for it
    // Called under the poster's lock: the message goes out from the poller (report_failures).
    if (!st.is_ok()) {
      std::lock_guard fl(failed_mu_);
      failed_rooms_.emplace_back(room, gen);
    }
  });
  reader_ = std::thread([this] { control_loop(); });
  for (int n = 0; n < nics; ++n)
    poller_ids_.push_back(env_.pollers->add(n, [this, n] {
      const int done = poster_->progress(n);
      report_failures();
      return done;
    }));
  return Status::ok();
}

// Decode cannot see a one-sided write fail: without this it would wait out its
// waiting_timeout for a notification that never comes (TCP's receiver sees the stream drop).
void RdmaPeer::report_failures() {
  std::vector<std::pair<RoomId, Generation>> rooms;
  {
    std::lock_guard fl(failed_mu_);
    if (failed_rooms_.empty()) return;
    rooms.swap(failed_rooms_);
  }
  for (auto [room, gen] : rooms)
    if (!writer_->send(control::Type::kRoomFailed, control::put_u64(room) + control::put_u32(gen)).is_ok()) break;  // gone: decode kills the session
}

Status RdmaPeer::report_room_failure(RoomId room, Generation generation) {
  {
    std::lock_guard lk(mu_);
    if (closed_) return unavailable("rdma session to " + addr_.to_string() + " closed");
    if (!control_failed_.is_ok()) return control_failed_;
  }
  return writer_->send(control::Type::kRoomFailed, control::put_u64(room) + control::put_u32(generation));
}

void RdmaPeer::free_slot(int slot) {
  std::lock_guard lk(slots_mu_);
  if (slot < 0 || static_cast<uint32_t>(slot) >= slots_ || !slot_busy_[slot]) return;
  slot_busy_[slot] = false;
  free_slots_.push_back(slot);
}

void RdmaPeer::control_loop() {
  const std::string where = addr_.to_string();
  Status st;
  while (st.is_ok()) {
    Result<control::Message> m = control::receive(fd_.get(), stopping_);
    if (!m.is_ok()) {
      st = m.status();
      break;
    }
    control::Reader r{m->payload};
    switch (m->type) {
      case control::Type::kGrant: {
        Result<Grant> g = control::decode_grant(m->payload);
        if (!g.is_ok()) {
          st = g.status();
          break;
        }
        std::lock_guard lk(mu_);
        grants_[g->room].push_back(*g);
        break;
      }
      case control::Type::kRevoke: {
        const RoomId room = r.get(8);
        const uint64_t token = r.get(8);
        if (!r.done()) {
          st = data_loss("rdma control: bad revoke");
          break;
        }
        {
          std::lock_guard lk(mu_);  // no submit of the room passes the grant check after this
          grants_.erase(room);
          rooms_synced_.erase(room);
        }
        poster_->wait_room_idle(room);  // what was posted has landed or failed
        st = writer_->send(control::Type::kRevokeAck, control::put_u64(token));
        break;
      }
      case control::Type::kCredit: {
        const uint32_t slot = static_cast<uint32_t>(r.get(4));
        if (!r.done() || slot >= slots_) {
          st = data_loss("rdma control: bad credit");
          break;
        }
        free_slot(static_cast<int>(slot));
        break;
      }
      case control::Type::kSyncAck: {
        const uint64_t token = r.get(8);
        if (!r.done()) {
          st = data_loss("rdma control: bad sync answer");
          break;
        }
        std::lock_guard lk(mu_);
        sync_acks_.insert(token);
        synced_.notify_all();
        break;
      }
      default:
        st = data_loss("rdma control: unexpected message type " + std::to_string(static_cast<int>(m->type)));
    }
  }
  if (!stopping_.load()) spdlog::warn("transfer(rdma): control connection to {} failed: {}", where, st.message());
  {
    std::lock_guard lk(mu_);
    if (control_failed_.is_ok()) control_failed_ = unavailable("rdma control connection to " + where + " lost: " + st.message());
    synced_.notify_all();
  }
  // Decode moves its queue pairs to error when the control connection goes: fail ours too.
  poster_->close(unavailable("rdma session to " + where + " lost its control connection"));
}

Result<std::shared_ptr<TransferBatch>> RdmaPeer::submit(const BatchRequest& req, std::vector<Pin> pins) {
  const RdmaTransportConfig& cfg = *env_.cfg;
  if (req.notify && req.notify->size() > slot_bytes_ - kNotifyHeaderBytes)
    return invalid_argument("notification of " + std::to_string(req.notify->size()) + " bytes exceeds the peer's slot of " +
                            std::to_string(slot_bytes_ - kNotifyHeaderBytes));
  StripePlan plan;
  if (!req.writes.empty()) {
    StripeOptions opt{cfg.rdma.stripe_alignment, cfg.rdma.min_stripe_bytes, cfg.rdma.max_wr_bytes};
    PDS_ASSIGN_OR_RETURN(plan, plan_stripes(req.writes, static_cast<int>(qps_.size()), opt));
  }
  bool synced;
  {
    std::lock_guard lk(mu_);
    synced = rooms_synced_.count(req.room) > 0;
  }
  if (!synced) PDS_RETURN_IF_ERROR(sync_grants());
  std::lock_guard lk(mu_);
  if (grants_.count(req.room)) rooms_synced_.insert(req.room);  // not if revoked meanwhile
  if (closed_) return unavailable("rdma session to " + addr_.to_string() + " closed");
  if (!control_failed_.is_ok()) return control_failed_;
  if (inflight_.load() >= cfg.control.max_outstanding_batches)
    return resource_exhausted(std::to_string(inflight_.load()) + " batches already in flight to " + addr_.to_string());
  auto git = grants_.find(req.room);
  std::vector<Grant> grants = git == grants_.end() ? std::vector<Grant>{} : git->second;
  std::optional<WriteOp> completion;
  int slot = -1;
  if (req.notify) {
    {
      std::lock_guard sl(slots_mu_);
      if (free_slots_.empty()) return resource_exhausted("every notification slot of " + addr_.to_string() + " is in use");
      slot = free_slots_.back();
      free_slots_.pop_back();
      slot_busy_[slot] = true;
    }
    const uint64_t at = uint64_t(slot) * slot_bytes_;
    uint64_t bytes = 0;
    for (const WriteOp& w : req.writes) bytes += w.length;
    const uint64_t len = fill_notify_slot(staging_.data() + at, {req.room, req.generation, bytes, *req.notify});
    completion = WriteOp{kNotifyStagingRegion, at, kNotifyRingRegion, at, len};
    // The slot is this batch's for now: the poster's grant check covers the ring write too.
    grants.push_back({req.room, kNotifyRingRegion, at, slot_bytes_, req.generation});
  }
  env_.metrics->batch_started();
  inflight_++;
  auto b = poster_->submit(req.room, req.generation, plan, grants, completion, slot < 0 ? 0 : static_cast<uint32_t>(slot), std::move(pins), slot);
  if (!b.is_ok()) {
    inflight_--;
    env_.metrics->batch_withdrawn();
    free_slot(slot);
  }
  return b;
}

Status RdmaPeer::sync_grants() {
  uint64_t token;
  {
    std::lock_guard lk(mu_);
    if (!control_failed_.is_ok()) return control_failed_;
    token = next_sync_++;
  }
  PDS_RETURN_IF_ERROR(writer_->send(control::Type::kSync, control::put_u64(token)));
  std::unique_lock lk(mu_);
  if (!synced_.wait_for(lk, env_.cfg->control.io_timeout, [&] { return sync_acks_.count(token) || !control_failed_.is_ok() || closed_; }))
    return Status(ErrorCode::kDeadlineExceeded, "rdma peer " + addr_.to_string() + " did not answer a grant sync");
  if (!sync_acks_.erase(token)) return control_failed_.is_ok() ? unavailable("rdma session closed") : control_failed_;
  return Status::ok();
}

Status RdmaPeer::health() const {
  {
    std::lock_guard lk(mu_);
    if (!control_failed_.is_ok()) return control_failed_;
  }
  return poster_ ? poster_->blocked() : unavailable("rdma session to " + addr_.to_string() + " was never set up");
}

void RdmaPeer::close() {
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    closed_ = true;
    synced_.notify_all();
  }
  stopping_.store(true);
  for (size_t n = 0; n < poller_ids_.size(); ++n) env_.pollers->remove(static_cast<int>(n), poller_ids_[n]);
  if (poster_) poster_->close(unavailable("rdma session to " + addr_.to_string() + " closed"));
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);  // decode errors its queue pairs of this session
  if (reader_.joinable()) reader_.join();
  for (auto& q : qps_) q->set_error();
}

}  // namespace pdserve::transfer::rdma
