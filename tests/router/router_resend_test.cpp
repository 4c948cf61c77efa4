// The router's one resend after a pooled keep-alive connection breaks under a request before
// any answer: against a raw-socket worker that closes a connection right after reading a POST
// on it (what a worker's idle close looks like when it races with the router's write).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <vector>

#include "router_test_util.h"

namespace pdserve::router::testing {
namespace {

const std::string kBody = R"({"model":"tiny","prompt":"hello","max_tokens":4})";

// Which POSTs the worker drops (closes the connection after reading, no answer).
enum class Drop {
  kReusedOnce,    // the first POST that arrives on a connection that already served one
  kAllReused,     // every POST on a connection that already served one
  kAllAfterFirst  // every POST but the very first, on any connection
};

class ClosingWorker {
 public:
  explicit ClosingWorker(Drop drop) : drop_(drop) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_fd_, 64), 0);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ClosingWorker() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    std::vector<std::thread> conns;
    {
      std::lock_guard lk(mu_);  // a connection thread takes mu_ as it ends: join without it
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
      conns.swap(conns_);
    }
    for (auto& t : conns) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int posts_read() const { return posts_read_.load(); }
  int posts_dropped() const { return posts_dropped_.load(); }

 private:
  void accept_loop() {
    while (!stop_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard lk(mu_);
      open_fds_.push_back(fd);
      conns_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // Reads one request (headers + Content-Length body). False when the peer closed.
  static bool read_request(int fd, std::string& buf, std::string& head) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      char tmp[4096];
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
    head = buf.substr(0, end);
    size_t body_len = 0;
    for (const char* key : {"Content-Length: ", "content-length: "}) {
      const size_t p = head.find(key);
      if (p != std::string::npos) body_len = std::stoul(head.substr(p + std::strlen(key)));
    }
    while (buf.size() < end + 4 + body_len) {
      char tmp[4096];
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
    buf.erase(0, end + 4 + body_len);
    return true;
  }

  bool should_drop(int posts_on_this_connection) {
    switch (drop_) {
      case Drop::kReusedOnce: return posts_on_this_connection > 0 && !dropped_once_.exchange(true);
      case Drop::kAllReused: return posts_on_this_connection > 0;
      case Drop::kAllAfterFirst: return posts_read_.load() > 1;
    }
    return false;
  }

  void serve(int fd) {
    std::string buf, head;
    int posts_here = 0;
    while (read_request(fd, buf, head)) {
      const bool post = head.rfind("POST ", 0) == 0;
      if (post) {
        posts_read_++;
        if (should_drop(posts_here)) {
          posts_dropped_++;
          break;  // close without answering
        }
        posts_here++;
      }
      const std::string body = post ? R"({"id":"x","object":"text_completion","choices":[]})" : "{}";
      const std::string resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                               "Content-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body;
      if (::send(fd, resp.data(), resp.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(resp.size())) break;
    }
    ::shutdown(fd, SHUT_RDWR);
    std::lock_guard lk(mu_);
    std::erase(open_fds_, fd);
    ::close(fd);
  }

  const Drop drop_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, dropped_once_{false};
  std::atomic<int> posts_read_{0}, posts_dropped_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> open_fds_;
  std::vector<std::thread> conns_;
};

Json worker_info(Router& r) { return r.server_info()["workers"][0]; }

TEST(RouterResend, PooledConnectionClosedUnderTheRequestIsSentAgainOnce) {
  ClosingWorker w(Drop::kReusedOnce);
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  ASSERT_TRUE(r);
  auto first = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  // The second call takes the pooled connection; the worker closes it after reading the request.
  auto second = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(w.posts_dropped(), 1);
  EXPECT_EQ(w.posts_read(), 3);  // first, the dropped one, its resend
  const Json info = worker_info(*r);
  EXPECT_EQ(info["resends"], 1) << info.dump();
  EXPECT_EQ(info["errors"], 0) << info.dump();
  auto m = get(r->port(), "/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("pdserve_router_worker_resends_total{worker=\"" + w.url() + "\",role=\"unified\"} 1"),
            std::string::npos);
}

TEST(RouterResend, AResendThatBreaksToo502sWithoutAThirdTry) {
  ClosingWorker w(Drop::kAllAfterFirst);
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  ASSERT_TRUE(r);
  ASSERT_EQ(post(r->port(), "/v1/completions", kBody)->status, 200);
  auto second = post(r->port(), "/v1/completions", kBody);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 502) << second->body;
  EXPECT_EQ(w.posts_read(), 3);  // the pooled try and one resend, no more
  EXPECT_EQ(worker_info(*r)["resends"], 1);
}

TEST(RouterResend, ABreakOnANewConnectionIsNotResent) {
  // Only reused connections are resent: on a new one the worker may have taken the request.
  ClosingWorker w(Drop::kAllAfterFirst);
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  ASSERT_TRUE(r);
  // Two calls at once: the second finds no idle connection and opens a new one.
  auto a = std::async(std::launch::async, [&] { return post(r->port(), "/v1/completions", kBody); });
  auto b = std::async(std::launch::async, [&] { return post(r->port(), "/v1/completions", kBody); });
  auto ra = a.get();
  auto rb = b.get();
  ASSERT_TRUE(ra && rb);
  const int failed = (ra->status == 502) + (rb->status == 502);
  const int resends = worker_info(*r)["resends"];
  // Either both went out on new connections (one fails, no resend: 2 POSTs read), or the
  // second reused the first's connection (then it was resent once: 3 POSTs read).
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(w.posts_read(), 2 + resends);
  EXPECT_LE(resends, 1);
}

TEST(RouterResend, EveryReusedBreakIsResentAndEveryCallSucceeds) {
  ClosingWorker w(Drop::kAllReused);
  auto cfg = fast_config();
  cfg.workers = {w.url()};
  auto r = start_router(cfg);
  ASSERT_TRUE(r);
  for (int i = 0; i < 5; ++i) {
    auto res = post(r->port(), "/v1/completions", kBody);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << "call " << i << ": " << res->body;
  }
  EXPECT_EQ(w.posts_dropped(), 4);
  EXPECT_EQ(worker_info(*r)["resends"], 4);
  EXPECT_EQ(worker_info(*r)["errors"], 0);
}

}  // namespace
}  // namespace pdserve::router::testing
