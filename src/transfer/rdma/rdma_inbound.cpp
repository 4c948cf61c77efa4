#include "rdma_inbound.h"

#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include "../handshake.h"
#include "notify_slot.h"

namespace pdserve::transfer::rdma {

Result<std::unique_ptr<RdmaInbound>> RdmaInbound::accept(net::Fd fd, InboundEnv env, const std::vector<RemoteRegion>& regions,
                                                         const std::atomic<bool>& stopping) {
  std::unique_ptr<RdmaInbound> in(new RdmaInbound(std::move(env)));
  const RdmaTransportConfig& cfg = *in->env_.cfg;
  in->fd_ = std::move(fd);
  const int f = in->fd_.get();
  PDS_RETURN_IF_ERROR(net::tune(f, cfg.control.io_timeout));
  // An unproven peer learns nothing: no QP number, no address, no rkey.
  PDS_RETURN_IF_ERROR(handshake::as_receiver(f, cfg.control, in->env_.instance_id, stopping).status());
  in->writer_ = std::make_unique<control::Writer>(f);
  PDS_ASSIGN_OR_RETURN(control::Message m, control::receive(f, stopping));
  if (m.type != control::Type::kConnInfo) return data_loss("rdma control: expected connection info first");
  PDS_ASSIGN_OR_RETURN(ConnInfo theirs, decode_conn_info(m.payload));
  const int nics = in->env_.fabric->nics();
  if (static_cast<int>(theirs.nics.size()) != nics)
    return Status(ErrorCode::kUnavailable, "rdma sender uses " + std::to_string(theirs.nics.size()) + " NICs, this side " + std::to_string(nics));

  in->slots_ = static_cast<uint32_t>(cfg.notify_slots);
  in->slot_bytes_ = kNotifyHeaderBytes + cfg.control.limits.max_notify_bytes;
  in->ring_.assign(uint64_t{in->slots_} * in->slot_bytes_, 0);
  PDS_ASSIGN_OR_RETURN(in->ring_mr_, in->env_.fabric->register_memory({kNotifyRingRegion, in->ring_.data(), in->ring_.size(), "notify_ring"}));
  ConnInfo mine;
  mine.regions = regions;
  const MrKeys& rk = in->ring_mr_->keys();
  mine.regions.push_back({kNotifyRingRegion, rk.addr, rk.size, in->ring_mr_->rkeys()});
  for (int n = 0; n < nics; ++n) {
    // Receives for every slot on every NIC: the sender posts a slot's immediate on any NIC.
    PDS_ASSIGN_OR_RETURN(std::unique_ptr<QueuePair> qp, in->env_.fabric->create_qp(n, 1, cfg.notify_slots));
    for (int s = 0; s < cfg.notify_slots; ++s) PDS_RETURN_IF_ERROR(qp->post_recv());
    PDS_RETURN_IF_ERROR(qp->connect(theirs.nics[n]));
    mine.nics.push_back(qp->endpoint());
    in->qps_.push_back(std::move(qp));
  }
  PDS_RETURN_IF_ERROR(in->writer_->send(control::Type::kConnInfo, encode_conn_info(mine)));
  PDS_RETURN_IF_ERROR(in->writer_->send(control::Type::kRing, control::put_u32(in->slots_) + control::put_u32(static_cast<uint32_t>(in->slot_bytes_))));
  return in;
}

void RdmaInbound::start() {
  reader_ = std::thread([this] { control_loop(); });
  for (int n = 0; n < static_cast<int>(qps_.size()); ++n) poller_ids_.push_back(env_.pollers->add(n, [this, n] { return poll_ring(n); }));
}

void RdmaInbound::control_loop() {
  Status st;
  while (st.is_ok()) {
    Result<control::Message> m = control::receive(fd_.get(), stopping_);
    if (!m.is_ok()) {
      st = m.status();
      break;
    }
    control::Reader r{m->payload};
    if (m->type == control::Type::kRoomFailed) {
      const RoomId room = r.get(8);
      const Generation gen = static_cast<Generation>(r.get(4));
      if (!r.done()) {
        st = data_loss("rdma control: bad room failure report");
        break;
      }
      // Only a room granted here under that generation: a stale report must not fail the
      // room's next use.
      if (env_.access->admit_notify(room, gen).is_ok())
        refuse(room, Status(ErrorCode::kUnavailable, "the sender failed room " + std::to_string(room) + " (an RDMA write failed, or its failure notice found no free slot)"));
      continue;
    }
    const uint64_t token = r.get(8);
    if ((m->type != control::Type::kRevokeAck && m->type != control::Type::kSync) || !r.done()) {
      st = data_loss("rdma control: unexpected message from the sender");
      break;
    }
    if (m->type == control::Type::kSync) {
      // grant() writes its push before returning, so every grant made before this reply is
      // ahead of it on the connection.
      st = writer_->send(control::Type::kSyncAck, control::put_u64(token));
      continue;
    }
    std::lock_guard lk(mu_);
    acks_.insert(token);
    acked_.notify_all();
  }
  if (!stopping_.load()) spdlog::warn("transfer(rdma): sender's control connection dropped: {}", st.message());
  // The sender can no longer confirm revokes: nothing more may land through this session.
  kill_qps("control connection lost");
}

void RdmaInbound::kill_qps(const std::string& why) {
  if (dead_.exchange(true)) return;
  for (auto& q : qps_) q->set_error();
  std::lock_guard lk(mu_);
  acked_.notify_all();
  (void)why;
}

void RdmaInbound::revoke(RoomId room) {
  if (dead_.load()) return;
  uint64_t token;
  {
    std::lock_guard lk(mu_);
    token = next_token_++;
  }
  Status st = writer_->send(control::Type::kRevoke, control::put_u64(room) + control::put_u64(token));
  std::unique_lock lk(mu_);
  const bool ok = st.is_ok() && acked_.wait_for(lk, env_.cfg->control.io_timeout, [&] { return acks_.count(token) || dead_.load(); }) &&
                  acks_.erase(token);
  lk.unlock();
  if (!ok) {
    spdlog::warn("transfer(rdma): sender did not confirm the revoke of room {}; its queue pairs here go to error", room);
    kill_qps("revoke unconfirmed");
  }
}

int RdmaInbound::poll_ring(int nic) {
  RecvCompletion rc[16];
  const int n = qps_[nic]->poll_recv(rc, 16);
  for (int i = 0; i < n; ++i) {
    if (!rc[i].ok) {
      if (!dead_.load()) spdlog::warn("transfer(rdma): receive on NIC {} failed: {}", nic, rc[i].error);
      continue;
    }
    deliver(rc[i].imm);
    (void)qps_[nic]->post_recv();  // the receive it consumed
  }
  return n;
}

void RdmaInbound::deliver(uint32_t slot) {
  if (slot >= slots_) {
    env_.metrics->frame_rejected();
    spdlog::warn("transfer(rdma): notification names slot {}, the ring has {}", slot, slots_);
    return;
  }
  Result<NotifySlot> n = read_notify_slot(ring_.data() + uint64_t{slot} * slot_bytes_, slot_bytes_);
  if (!n.is_ok()) {
    env_.metrics->frame_rejected();
    spdlog::warn("transfer(rdma): {}", n.status().message());
  } else if (Status st = env_.access->admit_notify(n->room, n->generation); !st.is_ok()) {
    refuse(n->room, st);
  } else {
    env_.metrics->received(n->batch_bytes);
    env_.metrics->notified();
    ReceiverCallbacks cb = env_.callbacks();
    if (cb.on_notify) cb.on_notify(n->room, n->payload);
  }
  (void)writer_->send(control::Type::kCredit, control::put_u32(slot));  // the slot is free again
}

void RdmaInbound::refuse(RoomId room, const Status& why) {
  env_.metrics->refused();
  spdlog::warn("transfer(rdma): refused for room {}: {}", room, why.message());
  if (!env_.access->fail_room(room)) return;
  ReceiverCallbacks cb = env_.callbacks();
  if (cb.on_room_failed) cb.on_room_failed(room, why);
}

void RdmaInbound::close() {
  if (closed_.exchange(true)) return;
  stopping_.store(true);
  for (size_t n = 0; n < poller_ids_.size(); ++n) env_.pollers->remove(static_cast<int>(n), poller_ids_[n]);
  kill_qps("closed");
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
}

}  // namespace pdserve::transfer::rdma
