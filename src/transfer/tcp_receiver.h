// Receiving half of the TCP transport (internal): accepts connections and applies incoming
// messages, admitting each write through the AccessTable before reading its payload
// straight into the destination region.
#pragma once

#include <atomic>
#include <list>
#include <mutex>
#include <thread>

#include "pdserve/transfer/access_table.h"
#include "pdserve/transfer/metrics.h"
#include "pdserve/transfer/tcp_transport.h"
#include "socket_io.h"

namespace pdserve::transfer {

class TcpReceiver {
 public:
  TcpReceiver(const TcpConfig& cfg, uint64_t instance_id, AccessTable* access, TransferMetrics* metrics)
      : cfg_(cfg), instance_id_(instance_id), access_(access), metrics_(metrics) {}
  ~TcpReceiver() { stop(); }

  Status start();  // binds and starts accepting
  void stop();
  uint16_t port() const { return port_; }
  void set_callbacks(ReceiverCallbacks cb);

 private:
  struct Conn {
    net::Fd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  // Per-connection progress through the current batch.
  struct BatchState {
    bool open = false;
    uint64_t id = 0;
    uint64_t writes = 0;
    uint64_t bytes = 0;       // payload bytes seen, refused ones included (they were drained)
    uint64_t landed = 0;      // bytes written into granted memory
    Status error;             // first refusal in this batch
  };

  void accept_loop();
  void serve(Conn* conn);
  Status on_write(int fd, const wire::FrameHeader& h, BatchState* b);
  Status on_notify(int fd, const wire::FrameHeader& h, uint64_t* out_seq);
  Status send_ack(int fd, const wire::FrameHeader& req, const Status& st, uint64_t landed, bool notify, uint64_t* out_seq);
  void refuse(RoomId room, const Status& why);
  Status drain(int fd, uint64_t n);
  void reap_finished();

  TcpConfig cfg_;
  uint64_t instance_id_;
  AccessTable* access_;
  TransferMetrics* metrics_;
  net::Fd listen_fd_;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards conns_ and callbacks_
  std::list<Conn> conns_;
  ReceiverCallbacks callbacks_;
};

}  // namespace pdserve::transfer
