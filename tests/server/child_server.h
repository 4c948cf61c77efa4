// `pdserve <args>` as a child process: started, waited for its listening line, signalled
// (SIGTERM drain tests) or killed for real (SIGKILL, the process-death tests).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pdserve::server::testing {

// Polls `cond` every 10 ms for up to `ms` milliseconds; true once it held.
inline bool wait_for(const std::function<bool()>& cond, int ms = 60000) {
  for (int i = 0; i < ms / 10; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// One call to a server in another process on 127.0.0.1: (status, body), or (-1, "") without
// an answer within 300 s.
inline std::pair<int, std::string> http_get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  auto r = c.Get(path.c_str());
  return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
}
inline std::pair<int, std::string> http_post(int port, const std::string& body, const std::string& path = "/v1/completions") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  auto r = c.Post(path.c_str(), body, "application/json");
  return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
}

// `pdserve <args>` as a child process, for tests that kill a server for real (SIGKILL).
class ChildServer {
 public:
  // Waits until the child printed `ready_line` (or exited); `merge_stderr`: its stderr joins
  // the captured stdout (for processes whose messages go there, e.g. a node follower).
  explicit ChildServer(std::vector<std::string> args, std::string ready_line = "pdserve: listening on http://", bool merge_stderr = false) {
    // argv is built before the fork: the child of a multithreaded test may only make
    // async-signal-safe calls until execv (an allocation there can spin forever on an allocator
    // lock another thread held at the fork; seen under AddressSanitizer).
    std::string bin = PDSERVE_BINARY;
    std::vector<char*> argv;
    argv.push_back(bin.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      if (merge_stderr) ::dup2(out[1], 2);
      ::close(out[0]);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // Read stdout until the listening line (the log lines before it name the other ports).
    std::string got;
    char buf[512];
    while (got.find(ready_line) == std::string::npos) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    out_fd_ = out[0];
    log_ = got;
    port_ = port_after(got, "pdserve: listening on http://127.0.0.1:");
    bootstrap_port_ = port_after(got, "bootstrap server on 127.0.0.1:");
  }
  ~ChildServer() { kill(); }
  pid_t pid() const { return pid_; }
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // The exit status (128 + N when killed by signal N), or -1 if still running after `timeout`.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  // Everything it printed on stdout so far (reads what is buffered, without blocking long).
  std::string drain_output() {
    if (out_fd_ < 0) return log_;
    pollfd p{out_fd_, POLLIN, 0};
    char buf[4096];
    while (::poll(&p, 1, 50) > 0) {
      ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) break;
      log_.append(buf, static_cast<size_t>(n));
    }
    return log_;
  }
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    out_fd_ = -1;
  }
  int port() const { return port_; }
  int bootstrap_port() const { return bootstrap_port_; }
  const std::string& log() const { return log_; }

 private:
  static int port_after(const std::string& s, const std::string& key) {
    size_t at = s.find(key);
    return at == std::string::npos ? 0 : std::atoi(s.c_str() + at + key.size());
  }
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0, bootstrap_port_ = 0;
  std::string log_;
};

}  // namespace pdserve::server::testing
