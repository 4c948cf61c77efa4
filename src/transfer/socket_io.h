// Thin, error-as-value wrappers over POSIX sockets for the TCP transport (internal).
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "pdserve/core/status.h"

namespace pdserve::transfer::net {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset();
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Listening socket bound to host:port (port 0 picks one); *bound_port receives the port.
Result<Fd> listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port);
Result<Fd> connect_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
// TCP_NODELAY, send / receive timeouts, and a user timeout so a vanished host is noticed.
Status tune(int fd, std::chrono::milliseconds io_timeout);
Status set_recv_timeout(int fd, std::chrono::milliseconds timeout);

// Sends every byte of iov (modified in place). Errors are kUnavailable.
Status send_all(int fd, iovec* iov, int iovcnt);

enum class RecvMode {
  kMidMessage,    // a receive timeout is an error
  kBetweenFrames, // a timeout before the first byte just means idle: keep waiting
};
// Reads exactly n bytes. kUnavailable on EOF / reset, kDeadlineExceeded on a stall.
// In kBetweenFrames mode, stop() is polled at every idle timeout.
template <typename StopFn>
Status recv_exact(int fd, void* buf, uint64_t n, RecvMode mode, StopFn stop);
Status recv_exact_once(int fd, void* buf, uint64_t n, bool idle_ok, bool* idle);

template <typename StopFn>
Status recv_exact(int fd, void* buf, uint64_t n, RecvMode mode, StopFn stop) {
  while (true) {
    bool idle = false;
    Status st = recv_exact_once(fd, buf, n, mode == RecvMode::kBetweenFrames, &idle);
    if (!idle) return st;
    if (stop()) return Status(ErrorCode::kAborted, "shutting down");
  }
}

// One contiguous buffer, every byte, as send_all / recv_exact_once (a stall is an error).
inline Status send_bytes(int fd, const void* p, size_t n) {
  iovec v{const_cast<void*>(p), n};
  return send_all(fd, &v, 1);
}
inline Status recv_bytes(int fd, void* p, size_t n) {
  bool idle = false;
  return recv_exact_once(fd, p, n, false, &idle);
}

std::string errno_text(int err);

}  // namespace pdserve::transfer::net
