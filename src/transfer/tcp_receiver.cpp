#include "tcp_receiver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <vector>

#include "handshake.h"

namespace pdserve::transfer {

using wire::FrameHeader;
using wire::FrameType;

namespace {
Status recv_header(int fd, FrameHeader* h, const wire::Limits& limits, const std::atomic<bool>& stopping) {
  uint8_t buf[wire::kHeaderBytes];
  PDS_RETURN_IF_ERROR(net::recv_exact(fd, buf, sizeof(buf), net::RecvMode::kBetweenFrames, [&] { return stopping.load(); }));
  PDS_ASSIGN_OR_RETURN(*h, wire::decode_header(buf, limits));
  return Status::ok();
}

Status send_frame(int fd, const FrameHeader& h, const void* payload, uint64_t n) {
  uint8_t buf[wire::kHeaderBytes];
  wire::encode_header(h, buf);
  iovec iov[2] = {{buf, sizeof(buf)}, {const_cast<void*>(payload), n}};
  return net::send_all(fd, iov, n ? 2 : 1);
}
}  // namespace

Status TcpReceiver::start() {
  PDS_ASSIGN_OR_RETURN(listen_fd_, net::listen_tcp(cfg_.listen_host, cfg_.listen_port, &port_));
  accept_thread_ = std::thread([this] { accept_loop(); });
  return Status::ok();
}

void TcpReceiver::stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<Conn> conns;
  {
    std::lock_guard lk(mu_);
    for (Conn& c : conns_) ::shutdown(c.fd.get(), SHUT_RDWR);  // unblocks the reader
    conns.splice(conns.end(), conns_);
  }
  for (Conn& c : conns) c.thread.join();
  listen_fd_.reset();
}

void TcpReceiver::set_callbacks(ReceiverCallbacks cb) {
  std::lock_guard lk(mu_);
  callbacks_ = std::move(cb);
}

void TcpReceiver::reap_finished() {
  std::lock_guard lk(mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpReceiver::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) {  // wake up to notice stop()
      reap_finished();
      continue;
    }
    net::Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) continue;
    if (Status st = net::tune(fd.get(), cfg_.io_timeout); !st.is_ok()) {
      spdlog::warn("transfer: dropping new connection: {}", st.message());
      continue;
    }
    std::lock_guard lk(mu_);
    Conn& c = conns_.emplace_back();
    c.fd = std::move(fd);
    c.thread = std::thread([this, &c] { serve(&c); });
  }
}

void TcpReceiver::serve(Conn* conn) {
  const int fd = conn->fd.get();
  auto hs = handshake::as_receiver(fd, cfg_, instance_id_, stopping_);
  Status st = hs.status();
  if (!st.is_ok() && st.code() == ErrorCode::kInvalidArgument) {
    metrics_->frame_rejected();
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    char host[64] = "?";
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 && sa.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&sa)->sin_addr, host, sizeof host);
    spdlog::warn("transfer: peer {} refused: {}", host, st.message());
    st = Status(ErrorCode::kUnavailable, st.message());  // logged: the exit below stays quiet
  }
  uint64_t in_seq = hs.is_ok() ? hs->next_in_seq : 1, out_seq = hs.is_ok() ? hs->next_out_seq : 1;
  BatchState b;
  while (st.is_ok()) {
    FrameHeader h;
    st = recv_header(fd, &h, cfg_.limits, stopping_);
    if (!st.is_ok()) {
      if (st.code() == ErrorCode::kDataLoss) metrics_->frame_rejected();
      break;
    }
    if (h.seq != in_seq++) {
      metrics_->frame_rejected();
      st = data_loss("sequence " + std::to_string(h.seq) + ", expected " + std::to_string(in_seq - 1));
      break;
    }
    switch (h.type) {
      case FrameType::kWrite:
        if (b.open && b.id != h.batch) {
          st = data_loss("batch " + std::to_string(h.batch) + " began before batch " + std::to_string(b.id) + " ended");
          break;
        }
        if (!b.open) {
          b = BatchState{};
          b.open = true;
          b.id = h.batch;
        }
        st = on_write(fd, h, &b);
        break;
      case FrameType::kBatchEnd:
        // The sender's own count must match what arrived, or the framing went wrong.
        if (!b.open || b.id != h.batch || b.bytes != h.offset || b.writes != h.aux) {
          st = data_loss("batch end for " + std::to_string(h.batch) + " does not match what arrived");
          break;
        }
        st = send_ack(fd, h, b.error, b.landed, false, &out_seq);
        b = BatchState{};
        break;
      case FrameType::kNotify:
        if (b.open) {
          st = data_loss("notification inside a batch");
          break;
        }
        st = on_notify(fd, h, &out_seq);
        break;
      default:
        st = data_loss("unexpected message type " + std::to_string(static_cast<int>(h.type)));
    }
    if (st.code() == ErrorCode::kDataLoss) metrics_->frame_rejected();
  }
  const bool quiet = stopping_.load() || (st.code() == ErrorCode::kUnavailable && !b.open);
  if (!quiet) spdlog::warn("transfer: dropping connection: {}", st.message());
  // A batch cut between writes left no partial write (on_write fails the room for that);
  // the sender fails the batch, so the room's notification never comes.
  // Tell the peer now; the descriptor itself is closed when the thread is reaped.
  ::shutdown(fd, SHUT_RDWR);
  conn->done.store(true);
}

Status TcpReceiver::on_write(int fd, const FrameHeader& h, BatchState* b) {
  ++b->writes;
  b->bytes += h.length;
  Result<Pin> pin = access_->admit_write(h.room, h.generation, h.region, h.offset, h.length);
  if (!pin.is_ok()) {
    refuse(h.room, pin.status());
    if (b->error.is_ok()) b->error = pin.status();
    return drain(fd, h.length);  // keep the connection: the framing itself is sound
  }
  // Zero copy: the payload goes straight into the granted range.
  Status st = net::recv_exact(fd, pin->data(), h.length, net::RecvMode::kMidMessage, [] { return false; });
  if (!st.is_ok()) {
    // Part of the range holds bytes from a message that never finished.
    refuse(h.room, st.with_context("write cut short"));
    return st;
  }
  b->landed += h.length;
  metrics_->received(h.length);
  return Status::ok();
}

Status TcpReceiver::on_notify(int fd, const FrameHeader& h, uint64_t* out_seq) {
  std::string payload(h.length, '\0');
  PDS_RETURN_IF_ERROR(net::recv_exact(fd, payload.data(), h.length, net::RecvMode::kMidMessage, [] { return false; }));
  Status st = access_->admit_notify(h.room, h.generation);
  if (st.is_ok()) {
    ReceiverCallbacks cb;
    {
      std::lock_guard lk(mu_);
      cb = callbacks_;
    }
    metrics_->notified();
    if (cb.on_notify) cb.on_notify(h.room, payload);
  } else {
    refuse(h.room, st);
  }
  return send_ack(fd, h, st, 0, true, out_seq);
}

Status TcpReceiver::send_ack(int fd, const FrameHeader& req, const Status& st, uint64_t landed, bool notify,
                             uint64_t* out_seq) {
  FrameHeader ack;
  ack.type = FrameType::kAck;
  ack.flags = notify ? wire::kFlagNotifyAck : 0;
  ack.room = req.room;
  ack.batch = req.batch;
  ack.seq = (*out_seq)++;
  ack.offset = landed;
  ack.aux = static_cast<uint64_t>(st.code());
  std::string msg = st.message().substr(0, cfg_.limits.max_error_bytes);
  ack.length = st.is_ok() ? 0 : msg.size();
  return send_frame(fd, ack, msg.data(), ack.length);
}

void TcpReceiver::refuse(RoomId room, const Status& why) {
  metrics_->refused();
  spdlog::warn("transfer: refused for room {}: {}", room, why.message());
  if (!access_->fail_room(room)) return;  // unknown room, or already failed: report once
  ReceiverCallbacks cb;
  {
    std::lock_guard lk(mu_);
    cb = callbacks_;
  }
  if (cb.on_room_failed) cb.on_room_failed(room, why);
}

Status TcpReceiver::drain(int fd, uint64_t n) {
  std::vector<uint8_t> scratch(std::min<uint64_t>(n, 64 * 1024));
  while (n > 0) {
    uint64_t chunk = std::min<uint64_t>(n, scratch.size());
    PDS_RETURN_IF_ERROR(net::recv_exact(fd, scratch.data(), chunk, net::RecvMode::kMidMessage, [] { return false; }));
    n -= chunk;
  }
  return Status::ok();
}

}  // namespace pdserve::transfer
