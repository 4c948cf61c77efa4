// Sending half of the TCP transport (internal): one session to one peer, several streams
// (connections), each with a send thread and an ack thread. Batches are split across the
// streams; a batch finishes when every stream that carried part of it acked, and its
// notification goes out only after that (and after earlier batches of its room finished).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pdserve/transfer/access_table.h"
#include "pdserve/transfer/metrics.h"
#include "pdserve/transfer/tcp_transport.h"
#include "socket_io.h"

namespace pdserve::transfer {

class TcpBatch final : public TransferBatch {
 public:
  std::optional<Status> poll() const override;
  Status wait(Clock::time_point deadline) const override;
  RoomId room() const override { return room_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  friend class TcpPeer;
  void publish(Status st);

  uint64_t id_ = 0;
  RoomId room_ = 0;
  Generation gen_ = 0;
  uint64_t bytes_ = 0;
  Clock::time_point submitted_;
  std::optional<std::string> notify_;
  std::vector<Pin> pins_;  // source ranges stay registered until the batch finishes
  // Guarded by the peer's mutex.
  int unsent_ = 0;                    // queued messages a send thread has not finished with
  int acks_pending_ = 0;              // streams that carried writes and have not acked
  std::vector<uint64_t> stream_bytes_;
  bool notify_sent_ = false, notify_acked_ = false;
  bool finished_ = false;
  Status error_;
  // Guarded by mu_: what waiters see.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<Status> final_;
};

class TcpPeer {
 public:
  static Result<std::unique_ptr<TcpPeer>> connect(const PeerAddress& addr, const TcpConfig& cfg, uint64_t instance_id,
                                                  TransferMetrics* metrics);
  ~TcpPeer() { close(); }

  // srcs[i] is the pinned source of req.writes[i] (checked by the caller).
  Result<std::shared_ptr<TransferBatch>> submit(const BatchRequest& req, std::vector<Pin> srcs);
  // Fails what is in flight, joins the threads; afterwards no source byte is read again.
  void close();
  Status health() const;
  const PeerAddress& address() const { return addr_; }

 private:
  struct SendItem {
    std::shared_ptr<TcpBatch> batch;
    wire::FrameHeader h;
    const uint8_t* payload = nullptr;  // kWrite: into the source region; kNotify: batch->notify_
  };
  struct Stream {
    net::Fd fd;
    std::deque<SendItem> queue;
    uint64_t queued_bytes = 0;
    uint64_t seq = 1;            // next outgoing; 0 was the hello (and 1 the proof, when authenticated)
    uint64_t first_ack_seq = 1;  // the receiver's first ack
    std::thread sender, acker;
  };

  TcpPeer(const PeerAddress& addr, const TcpConfig& cfg, TransferMetrics* metrics) : addr_(addr), cfg_(cfg), metrics_(metrics) {}
  void send_loop(Stream* s);
  void ack_loop(int index);
  Status on_ack(int index, const wire::FrameHeader& h, const std::string& msg);
  int least_loaded_stream() const;
  void enqueue(int stream, SendItem item);
  void fail_locked(const Status& st);
  void release_notifies_locked();
  void maybe_finish_locked(const std::shared_ptr<TcpBatch>& b);

  PeerAddress addr_;
  TcpConfig cfg_;
  TransferMetrics* metrics_;
  uint64_t max_write_bytes_ = 0;  // the smaller of ours and the receiver's
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::deque<std::shared_ptr<TcpBatch>> inflight_;  // submission order
  std::unordered_map<uint64_t, std::shared_ptr<TcpBatch>> by_id_;
  Status failed_;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};
  uint64_t next_batch_id_ = 1;
};

}  // namespace pdserve::transfer
