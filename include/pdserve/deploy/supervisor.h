// A small process supervisor for `pdserve up`: starts children in their own process groups
// with their output in log files, reports the first stop signal or child exit, and stops
// every group (SIGTERM, then SIGKILL after a grace period). Single-threaded by design: the
// owner calls wait() in a loop and decides what an event means.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::deploy {

struct ChildSpec {
  std::string name;               // for messages ("prefill")
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in PATH
  std::vector<std::string> env;   // NAME=VALUE added to (or replacing in) our environment
  std::string log_path;           // stdout and stderr, appended
};

struct ChildExit {
  std::string name;
  pid_t pid = -1;
  int wait_status = 0;            // as from waitpid
  bool requested = false;         // we asked it to stop
  std::string describe() const;   // "exited with status 1", "killed by signal 9 (Killed)"
  bool clean() const;             // exit status 0, or ended by the SIGTERM we sent
};

class Supervisor {
 public:
  // Blocks SIGINT, SIGTERM and SIGCHLD in the calling thread (create it before any thread);
  // the previous mask comes back on destruction.
  Supervisor();
  ~Supervisor();  // stops whatever still runs (grace_s())
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  Result<pid_t> spawn(const ChildSpec& spec);

  struct Event {
    enum Kind { kTimeout, kSignal, kChildExited } kind = kTimeout;
    int signal = 0;
    ChildExit exit;
  };
  // Returns at the first stop signal or child exit, or after timeout_s.
  Event wait(double timeout_s);

  // SIGTERM to each running group, last started first; SIGKILL to those left after grace_s.
  // Returns how each child ended.
  std::vector<ChildExit> stop_all(double grace_s);

  size_t running() const { return children_.size(); }
  void set_grace_s(double s) { grace_s_ = s; }
  double grace_s() const { return grace_s_; }

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid;
    bool term_sent = false;
  };
  bool reap(size_t i, bool block, ChildExit* out);  // true when child i ended (and is removed)

  std::vector<Child> children_;
  sigset_t old_mask_{};
  double grace_s_ = 10.0;
};

// The last n lines of a file ("" when unreadable), for showing why a child died.
std::string tail_lines(const std::string& path, int n);

}  // namespace pdserve::deploy
