#include "socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pdserve::transfer::net {

namespace {
Status unavailable(std::string m) { return Status(ErrorCode::kUnavailable, std::move(m)); }

Result<sockaddr_in> resolve(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) return unavailable("cannot resolve '" + host + "': " + gai_strerror(rc));
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

timeval to_timeval(std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  return tv;
}
}  // namespace

std::string errno_text(int err) { return std::strerror(err); }

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<Fd> listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port) {
  PDS_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(host, port));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return unavailable("socket: " + errno_text(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return unavailable("bind " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  if (::listen(fd.get(), 128) != 0) return unavailable("listen: " + errno_text(errno));
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = ntohs(addr.sin_port);
  return fd;
}

Result<Fd> connect_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  PDS_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(host, port));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return unavailable("socket: " + errno_text(errno));
  // Non-blocking connect so an unreachable address costs the timeout, not the kernel's minutes.
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) return unavailable("connect " + where + ": " + errno_text(errno));
    pollfd p{fd.get(), POLLOUT, 0};
    int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc == 0) return Status(ErrorCode::kDeadlineExceeded, "connect " + where + ": no answer within " + std::to_string(timeout.count()) + " ms");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc < 0 || err != 0) return unavailable("connect " + where + ": " + errno_text(rc < 0 ? errno : err));
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

Status set_recv_timeout(int fd, std::chrono::milliseconds timeout) {
  timeval tv = to_timeval(timeout);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) return unavailable("SO_RCVTIMEO: " + errno_text(errno));
  return Status::ok();
}

Status tune(int fd, std::chrono::milliseconds io_timeout) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // acks and headers are small
  timeval tv = to_timeval(io_timeout);
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) return unavailable("SO_SNDTIMEO: " + errno_text(errno));
  unsigned user_timeout = static_cast<unsigned>(io_timeout.count());
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
  return set_recv_timeout(fd, io_timeout);
}

Status send_all(int fd, iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(iovcnt, 1024));
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status(ErrorCode::kDeadlineExceeded, "send stalled (peer not reading)");
      return unavailable("send: " + errno_text(errno));
    }
    size_t left = static_cast<size_t>(n);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::ok();
}

Status recv_exact_once(int fd, void* buf, uint64_t n, bool idle_ok, bool* idle) {
  auto* p = static_cast<uint8_t*>(buf);
  uint64_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r > 0) {
      got += static_cast<uint64_t>(r);
      continue;
    }
    if (r == 0) return unavailable(got == 0 && idle_ok ? "connection closed" : "connection closed mid-message");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (got == 0 && idle_ok) {
        *idle = true;
        return Status::ok();
      }
      return Status(ErrorCode::kDeadlineExceeded, "receive stalled mid-message");
    }
    return unavailable("recv: " + errno_text(errno));
  }
  return Status::ok();
}

}  // namespace pdserve::transfer::net
