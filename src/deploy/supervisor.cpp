// fork/exec rather than posix_spawn: the child must set PR_SET_PDEATHSIG so that it dies
// with us even when we are SIGKILLed, which posix_spawn cannot express.
#include "pdserve/deploy/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <thread>

extern char** environ;

namespace pdserve::deploy {
namespace {

using Clock = std::chrono::steady_clock;

std::string find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t end = p.find(':', pos);
    std::string dir = p.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return "";
}

sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGCHLD);
  return s;
}

}  // namespace

std::string ChildExit::describe() const {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

bool ChildExit::clean() const {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status) == 0;
  return requested && WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGTERM;
}

Supervisor::Supervisor() {
  sigset_t s = stop_signals();
  pthread_sigmask(SIG_BLOCK, &s, &old_mask_);
}

Supervisor::~Supervisor() {
  stop_all(grace_s_);
  // Drop signals still pending for us before unblocking, so a late SIGCHLD does no harm;
  // a pending SIGINT/SIGTERM stays pending and acts normally once unblocked.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  timespec zero{0, 0};
  while (sigtimedwait(&chld, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

Result<pid_t> Supervisor::spawn(const ChildSpec& spec) {
  if (spec.argv.empty()) return invalid_argument(spec.name + ": empty command");
  const std::string exe = find_in_path(spec.argv[0]);
  if (exe.empty() || access(exe.c_str(), X_OK) != 0)
    return not_found(spec.name + ": " + spec.argv[0] + " is not an executable file");
  // Everything the child touches is prepared here: after fork only async-signal-safe calls.
  std::map<std::string, std::string> envmap;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    envmap[kv.substr(0, kv.find('='))] = kv;
  }
  for (const std::string& kv : spec.env) envmap[kv.substr(0, kv.find('='))] = kv;
  std::vector<std::string> env_store;
  for (auto& [k, kv] : envmap) env_store.push_back(kv);
  std::vector<char*> envp, argv;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store = spec.argv;
  for (auto& s : argv_store) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string log = spec.log_path.empty() ? "/dev/null" : spec.log_path;
  int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return io_error(spec.name + ": cannot open log " + log + ": " + strerror(errno));
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    close(null_fd);
    return internal_error(spec.name + ": fork failed: " + strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);                    // its own group: we signal it and its descendants as one
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // and it goes when we go, however we go
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execve(exe.c_str(), argv.data(), envp.data());
    const char msg[] = "pdserve supervisor: exec failed\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so a signal sent right after spawn reaches the group
  close(log_fd);
  close(null_fd);
  children_.push_back({spec, pid});
  return pid;
}

bool Supervisor::reap(size_t i, bool block, ChildExit* out) {
  Child& c = children_[i];
  siginfo_t info{};
  // Look without reaping first: while the leader is a zombie its group id cannot be reused,
  // so sweeping the group with SIGKILL cannot hit a stranger.
  int rc;
  do rc = waitid(P_PID, c.pid, &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG));
  while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno == ECHILD) {  // reaped behind our back (SIGCHLD ignored by a library?)
    *out = ChildExit{c.spec.name, c.pid, 0, c.term_sent};
    children_.erase(children_.begin() + static_cast<long>(i));
    return true;
  }
  if (rc != 0 || info.si_pid == 0) return false;
  kill(-c.pid, SIGKILL);
  int st = 0;
  waitpid(c.pid, &st, 0);
  *out = ChildExit{c.spec.name, c.pid, st, c.term_sent};
  children_.erase(children_.begin() + static_cast<long>(i));
  return true;
}

Supervisor::Event Supervisor::wait(double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const sigset_t sigs = stop_signals();
  for (;;) {
    Event ev;
    for (size_t i = 0; i < children_.size(); ++i)
      if (reap(i, false, &ev.exit)) {
        ev.kind = Event::kChildExited;
        return ev;
      }
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return ev;
    // Short slices: a SIGCHLD may be merged or lost, the waitid above is what counts.
    auto slice = std::min<Clock::duration>(left, std::chrono::milliseconds(100));
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      ev.kind = Event::kSignal;
      ev.signal = sig;
      return ev;
    }
  }
}

std::vector<ChildExit> Supervisor::stop_all(double grace_s) {
  std::vector<ChildExit> out;
  for (size_t i = children_.size(); i-- > 0;) {
    children_[i].term_sent = true;
    kill(-children_[i].pid, SIGTERM);
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  while (!children_.empty() && Clock::now() < deadline) {
    ChildExit e;
    bool any = false;
    for (size_t i = 0; i < children_.size(); ++i)
      if (reap(i, false, &e)) {
        out.push_back(e);
        any = true;
        break;
      }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (!children_.empty()) {
    kill(-children_.back().pid, SIGKILL);
    ChildExit e;
    if (reap(children_.size() - 1, true, &e)) out.push_back(e);
  }
  return out;
}

std::string tail_lines(const std::string& path, int n) {
  std::ifstream in(path);
  if (!in) return "";
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > n) last.pop_front();
  }
  std::string out;
  for (auto& l : last) out += l + "\n";
  return out;
}

}  // namespace pdserve::deploy
