#include "tcp_peer.h"

#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_set>

#include "handshake.h"

namespace pdserve::transfer {

using wire::FrameHeader;
using wire::FrameType;

namespace {
Status unavailable(std::string m) { return Status(ErrorCode::kUnavailable, std::move(m)); }
}  // namespace

// ---- TcpBatch ----

std::optional<Status> TcpBatch::poll() const {
  std::lock_guard lk(mu_);
  return final_;
}

Status TcpBatch::wait(Clock::time_point deadline) const {
  std::unique_lock lk(mu_);
  if (!cv_.wait_until(lk, deadline, [&] { return final_.has_value(); }))
    return Status(ErrorCode::kDeadlineExceeded, "batch for room " + std::to_string(room_) + " not finished by its deadline");
  return *final_;
}

void TcpBatch::publish(Status st) {
  std::lock_guard lk(mu_);
  final_ = std::move(st);
  cv_.notify_all();
}

// ---- connection setup ----

Result<std::unique_ptr<TcpPeer>> TcpPeer::connect(const PeerAddress& addr, const TcpConfig& cfg, uint64_t instance_id,
                                                  TransferMetrics* metrics) {
  std::unique_ptr<TcpPeer> peer(new TcpPeer(addr, cfg, metrics));
  peer->max_write_bytes_ = cfg.limits.max_write_bytes;
  for (int i = 0; i < cfg.streams_per_peer; ++i) {
    auto s = std::make_unique<Stream>();
    PDS_ASSIGN_OR_RETURN(s->fd, net::connect_tcp(addr.host, addr.port, cfg.connect_timeout));
    const int fd = s->fd.get();
    PDS_RETURN_IF_ERROR(net::tune(fd, cfg.io_timeout));
    PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.connect_timeout));
    PDS_ASSIGN_OR_RETURN(handshake::Outcome hs,
                         handshake::as_sender(fd, cfg, instance_id, static_cast<uint64_t>(i), addr.to_string()));
    s->seq = hs.next_out_seq;
    s->first_ack_seq = hs.next_in_seq;
    peer->max_write_bytes_ = std::min(peer->max_write_bytes_, hs.max_write_bytes);
    PDS_RETURN_IF_ERROR(net::set_recv_timeout(fd, cfg.io_timeout));
    peer->streams_.push_back(std::move(s));
  }
  for (int i = 0; i < cfg.streams_per_peer; ++i) {
    Stream* s = peer->streams_[i].get();
    s->sender = std::thread([p = peer.get(), s] { p->send_loop(s); });
    s->acker = std::thread([p = peer.get(), i] { p->ack_loop(i); });
  }
  return peer;
}

void TcpPeer::close() {
  {
    std::lock_guard lk(mu_);
    if (stop_) return;
    stopping_.store(true);
    fail_locked(unavailable("session to " + addr_.to_string() + " closed"));
    stop_ = true;
    work_cv_.notify_all();
  }
  for (auto& s : streams_) {
    if (s->sender.joinable()) s->sender.join();
    if (s->acker.joinable()) s->acker.join();
  }
}

Status TcpPeer::health() const {
  std::lock_guard lk(mu_);
  return failed_;
}

// ---- submit ----

int TcpPeer::least_loaded_stream() const {
  int best = 0;
  for (int i = 1; i < static_cast<int>(streams_.size()); ++i)
    if (streams_[i]->queued_bytes < streams_[best]->queued_bytes) best = i;
  return best;
}

void TcpPeer::enqueue(int stream, SendItem item) {
  item.batch->unsent_++;
  streams_[stream]->queued_bytes += item.h.type == FrameType::kWrite ? item.h.length : 0;
  streams_[stream]->queue.push_back(std::move(item));
}

Result<std::shared_ptr<TransferBatch>> TcpPeer::submit(const BatchRequest& req, std::vector<Pin> srcs) {
  std::lock_guard lk(mu_);
  if (!failed_.is_ok()) return failed_;
  if (static_cast<int>(inflight_.size()) >= cfg_.max_outstanding_batches)
    return resource_exhausted(std::to_string(inflight_.size()) + " batches already in flight to " + addr_.to_string());
  auto b = std::make_shared<TcpBatch>();
  b->id_ = next_batch_id_++;
  b->room_ = req.room;
  b->gen_ = req.generation;
  b->notify_ = req.notify;
  b->submitted_ = Clock::now();
  const int n = static_cast<int>(streams_.size());
  b->stream_bytes_.assign(n, 0);
  std::vector<uint64_t> stream_writes(n, 0);
  for (size_t w = 0; w < req.writes.size(); ++w) {
    const WriteOp& op = req.writes[w];
    b->bytes_ += op.length;
    // Split big writes over the streams; never into pieces smaller than min_stripe_bytes.
    uint64_t piece = std::max(cfg_.min_stripe_bytes, (op.length + n - 1) / n);
    piece = std::min(piece, max_write_bytes_);
    for (uint64_t off = 0; off < op.length; off += piece) {
      const int s = least_loaded_stream();
      SendItem item{b, {}, srcs[w].data() + off};
      item.h.type = FrameType::kWrite;
      item.h.room = req.room;
      item.h.generation = req.generation;
      item.h.batch = b->id_;
      item.h.region = op.remote_region;
      item.h.offset = op.remote_offset + off;
      item.h.length = std::min(piece, op.length - off);
      b->stream_bytes_[s] += item.h.length;
      stream_writes[s]++;
      enqueue(s, std::move(item));
    }
  }
  for (int s = 0; s < n; ++s) {
    if (stream_writes[s] == 0) continue;
    SendItem end{b, {}, nullptr};
    end.h.type = FrameType::kBatchEnd;
    end.h.room = req.room;
    end.h.batch = b->id_;
    end.h.offset = b->stream_bytes_[s];
    end.h.aux = stream_writes[s];
    enqueue(s, std::move(end));
    b->acks_pending_++;
  }
  b->pins_ = std::move(srcs);
  inflight_.push_back(b);
  by_id_[b->id_] = b;
  metrics_->batch_started();
  if (b->acks_pending_ == 0) release_notifies_locked();  // notification-only batch
  work_cv_.notify_all();
  return std::shared_ptr<TransferBatch>(b);
}

// ---- threads ----

void TcpPeer::send_loop(Stream* s) {
  std::unique_lock lk(mu_);
  while (true) {
    work_cv_.wait(lk, [&] { return stop_ || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stop_ and nothing left to settle
    SendItem item = std::move(s->queue.front());
    s->queue.pop_front();
    const uint64_t payload = item.h.type == FrameType::kBatchEnd ? 0 : item.h.length;
    if (failed_.is_ok()) {
      item.h.seq = s->seq++;
      lk.unlock();
      uint8_t hdr[wire::kHeaderBytes];
      wire::encode_header(item.h, hdr);
      // Header and payload in one sendmsg, payload straight from the source region.
      iovec iov[2] = {{hdr, sizeof(hdr)}, {const_cast<uint8_t*>(item.payload), payload}};
      Status st = net::send_all(s->fd.get(), iov, payload ? 2 : 1);
      lk.lock();
      if (!st.is_ok()) fail_locked(Status(ErrorCode::kUnavailable, "sending to " + addr_.to_string() + ": " + st.message()));
    }
    if (item.h.type == FrameType::kWrite) s->queued_bytes -= item.h.length;
    item.batch->unsent_--;
    maybe_finish_locked(item.batch);
  }
}

void TcpPeer::ack_loop(int index) {
  const int fd = streams_[index]->fd.get();
  uint64_t expect_seq = streams_[index]->first_ack_seq;
  while (true) {
    uint8_t buf[wire::kHeaderBytes];
    Status st = net::recv_exact(fd, buf, sizeof(buf), net::RecvMode::kBetweenFrames, [&] { return stopping_.load(); });
    std::string msg;
    FrameHeader h;
    if (st.is_ok()) {
      auto dec = wire::decode_header(buf, cfg_.limits);
      if (!dec.is_ok()) st = dec.status();
      else h = *dec;
    }
    if (st.is_ok() && (h.type != FrameType::kAck || h.seq != expect_seq++)) st = data_loss("unexpected message from receiver");
    if (st.is_ok() && h.length) {
      msg.resize(h.length);
      st = net::recv_exact(fd, msg.data(), h.length, net::RecvMode::kMidMessage, [] { return false; });
    }
    std::lock_guard lk(mu_);
    if (st.is_ok()) st = on_ack(index, h, msg);
    if (!st.is_ok()) {
      fail_locked(Status(ErrorCode::kUnavailable, "peer " + addr_.to_string() + " stream " + std::to_string(index) + ": " + st.message()));
      return;
    }
  }
}

Status TcpPeer::on_ack(int index, const FrameHeader& h, const std::string& msg) {
  auto it = by_id_.find(h.batch);
  if (it == by_id_.end()) return data_loss("ack for unknown batch " + std::to_string(h.batch));
  std::shared_ptr<TcpBatch> b = it->second;
  const auto code = static_cast<ErrorCode>(h.aux);
  if (h.flags & wire::kFlagNotifyAck) {
    if (!b->notify_sent_ || b->notify_acked_) return data_loss("unexpected notification ack");
    b->notify_acked_ = true;
    if (code != ErrorCode::kOk && b->error_.is_ok()) b->error_ = Status(code, "peer refused the notification: " + msg);
  } else {
    if (b->acks_pending_ == 0 || b->stream_bytes_[index] == 0) return data_loss("unexpected batch ack");
    if (code != ErrorCode::kOk) {
      if (b->error_.is_ok()) b->error_ = Status(code, "peer refused a write: " + msg);
    } else if (h.offset != b->stream_bytes_[index]) {
      return data_loss("peer acked " + std::to_string(h.offset) + " bytes, stream sent " + std::to_string(b->stream_bytes_[index]));
    }
    b->stream_bytes_[index] = 0;
    if (--b->acks_pending_ == 0) release_notifies_locked();
  }
  maybe_finish_locked(b);
  return Status::ok();
}

// ---- completion ----

void TcpPeer::release_notifies_locked() {
  // A room's notification waits for every earlier batch of that room to finish.
  std::unordered_set<RoomId> busy;
  for (const auto& b : inflight_) {
    if (!busy.count(b->room_) && b->notify_ && !b->notify_sent_ && b->acks_pending_ == 0 && b->error_.is_ok()) {
      b->notify_sent_ = true;
      SendItem item{b, {}, reinterpret_cast<const uint8_t*>(b->notify_->data())};
      item.h.type = FrameType::kNotify;
      item.h.room = b->room_;
      item.h.generation = b->gen_;
      item.h.batch = b->id_;
      item.h.length = b->notify_->size();
      enqueue(least_loaded_stream(), std::move(item));
      work_cv_.notify_all();
    }
    busy.insert(b->room_);
  }
}

void TcpPeer::maybe_finish_locked(const std::shared_ptr<TcpBatch>& b) {
  if (b->finished_ || b->unsent_ > 0 || b->acks_pending_ > 0) return;
  if (b->notify_sent_ && !b->notify_acked_) return;
  if (b->error_.is_ok() && b->notify_ && !b->notify_sent_) return;  // waits for an earlier batch of its room
  b->finished_ = true;
  inflight_.erase(std::find(inflight_.begin(), inflight_.end(), b));
  by_id_.erase(b->id_);
  b->pins_.clear();  // from here on no byte of the source is read
  metrics_->batch_finished(b->error_.is_ok(), b->bytes_, b->submitted_);
  if (!b->error_.is_ok()) {
    // Later batches of a failed room must not notify success.
    for (const auto& later : std::vector<std::shared_ptr<TcpBatch>>(inflight_.begin(), inflight_.end())) {
      if (later->room_ == b->room_ && later->error_.is_ok() && !later->notify_sent_) {
        later->error_ = Status(ErrorCode::kAborted, "an earlier batch of room " + std::to_string(b->room_) + " failed: " + b->error_.message());
        maybe_finish_locked(later);
      }
    }
  }
  b->publish(b->error_);
  release_notifies_locked();
}

void TcpPeer::fail_locked(const Status& st) {
  if (!failed_.is_ok()) return;
  failed_ = st;
  if (!stopping_.load()) spdlog::warn("transfer: session to {} failed: {}", addr_.to_string(), st.message());
  for (auto& s : streams_) ::shutdown(s->fd.get(), SHUT_RDWR);  // unblocks sends and ack reads
  for (const auto& b : std::vector<std::shared_ptr<TcpBatch>>(inflight_.begin(), inflight_.end())) {
    if (b->error_.is_ok()) b->error_ = st;
    b->acks_pending_ = 0;  // no ack will come now
    if (b->notify_sent_) b->notify_acked_ = true;
    maybe_finish_locked(b);
  }
  work_cv_.notify_all();  // send threads discard what is queued
}

}  // namespace pdserve::transfer
