// `pdserve up` as a user runs it, a real process tree: it gets ready, prints where to send
// requests, and after SIGINT or SIGTERM, or the death of one child, no child is left.
// UpWithFakeRoles runs the roles through tests/deploy/fake_roles.sh (prefill and decode as
// `pdserve serve`); UpRealRoles runs the real prefill/decode and skips itself until the
// binary has them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

// No socket listens on the port (TIME_WAIT leftovers of the stopped servers do not count).
bool port_free(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      char local[128] = {};
      unsigned st = 0;
      if (sscanf(line.c_str(), "%*d: %127s %*s %x", local, &st) == 2 && st == 0x0A) {
        const char* colon = strrchr(local, ':');
        if (colon && std::strtol(colon + 1, nullptr, 16) == port) return false;
      }
    }
  }
  return true;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream st("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    std::getline(st, line);
    auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    char state;
    int ppid = 0;
    if (sscanf(line.c_str() + close_paren + 2, "%c %d", &state, &ppid) == 2 && ppid == parent && state != 'Z')
      out.push_back(pid);
  }
  if (d) closedir(d);
  return out;
}

bool alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(st, line);
  auto p = line.rfind(')');
  return p != std::string::npos && line[p + 2] != 'Z';
}

int exe_status(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class UpProcess {
 public:
  UpProcess(std::vector<std::string> args, std::vector<std::string> env, const std::string& err_path) {
    // argv is built before the fork: the child may only make async-signal-safe calls until
    // execv (child_server.h says why).
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, 2);
      close(fds[0]);
      for (auto& e : env) putenv(e.data());
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_fd_ = fds[0];
  }
  ~UpProcess() {
    if (pid_ > 0 && status_ < 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_fd_);
  }
  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }

  // Reads stdout until `needle` appears or the process exits or time runs out.
  bool wait_for(const std::string& needle, double timeout_s) {
    auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (out_.find(needle) == std::string::npos) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
      if (left <= 0) return false;
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, std::min(left, 200)) > 0) {
        char buf[4096];
        ssize_t n = read(out_fd_, buf, sizeof buf);
        if (n <= 0) return out_.find(needle) != std::string::npos;
        out_.append(buf, static_cast<size_t>(n));
      }
    }
    return true;
  }

  // Waits for the exit; the exit code, 128+signal, or -1 on timeout.
  int wait_exit(double timeout_s) {
    auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < end) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        char buf[4096];
        ssize_t n;
        while ((n = read(out_fd_, buf, sizeof buf)) > 0) out_.append(buf, static_cast<size_t>(n));
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string out_;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class Up : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("pds-up-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    ASSERT_EQ(exe_status(std::string(PDSERVE_BINARY) + " make-model --preset tiny-k3 --out " + (dir_ / "m").string() +
                         " >/dev/null 2>&1"),
              0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // `pdserve up` on free ports; fake: through fake_roles.sh.
  std::unique_ptr<UpProcess> start(bool fake, const std::string& name) {
    ports_ = {free_port(), free_port(), free_port(), free_port()};
    std::vector<std::string> args = {PDSERVE_BINARY,  "up",
                                     "--model",       (dir_ / "m").string(),
                                     "--port",        std::to_string(ports_[0]),
                                     "--prefill-port", std::to_string(ports_[1]),
                                     "--decode-port", std::to_string(ports_[2]),
                                     "--bootstrap-port", std::to_string(ports_[3]),
                                     "--log-dir",     (dir_ / name).string(),
                                     "--grace",       "5",
                                     "--ready-timeout", "120"};
    std::vector<std::string> env;
    if (fake) {
      args.insert(args.end(), {"--exe", std::string(PDSERVE_SOURCE_DIR) + "/tests/deploy/fake_roles.sh"});
      env.push_back(std::string("PDSERVE_REAL=") + PDSERVE_BINARY);
    }
    err_ = (dir_ / (name + ".stderr")).string();
    return std::make_unique<UpProcess>(args, env, err_);
  }

  void expect_ready(UpProcess& up) {
    ASSERT_TRUE(up.wait_for("pdserve up: ready", 120)) << up.out() << slurp(err_);
    EXPECT_NE(up.out().find("pdserve: listening on http://127.0.0.1:" + std::to_string(ports_[0])), std::string::npos);
    httplib::Client cli("127.0.0.1", ports_[0]);
    auto h = cli.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }

  void expect_nothing_left(const std::vector<pid_t>& kids) {
    for (pid_t k : kids) EXPECT_FALSE(alive(k)) << "child " << k << " survived pdserve up";
    for (int p : ports_) EXPECT_TRUE(port_free(p)) << "port " << p << " still bound";
  }

  void stop_with(int sig, bool fake) {
    auto up = start(fake, std::string("sig") + std::to_string(sig));
    expect_ready(*up);
    auto kids = children_of(up->pid());
    EXPECT_EQ(kids.size(), 3u) << "prefill, decode, router";
    kill(up->pid(), sig);
    EXPECT_EQ(up->wait_exit(30), 0) << up->out() << slurp(err_);
    for (const char* role : {"router", "decode", "prefill"})
      EXPECT_NE(up->out().find(std::string("pdserve up: ") + role + " exited with status 0"), std::string::npos)
          << up->out();
    expect_nothing_left(kids);
  }

  // A one-host topology on free ports; MODEL_PATH is `model`.
  std::string write_topology(const std::string& name, const std::string& model) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "MODEL_PATH=" << model << "\nDEPLOY_MODE=local\nBIND_HOST=127.0.0.1\nGPUS_PER_NODE=0\n"
                        << "PREFILL_NODES=127.0.0.1\nPREFILL_PORT=" << free_port() << "\nBOOTSTRAP_PORT=" << free_port()
                        << "\nDECODE_NODES=127.0.0.1\nDECODE_PORT=" << free_port() << "\nROUTER_NODE=127.0.0.1\nROUTER_PORT="
                        << free_port() << "\n";
    return path;
  }
  // Runs `up --config cfg args...`; its exit code (-1: still running after 30 s).
  int run_up(const std::string& cfg, std::vector<std::string> args, const std::string& name, std::string* out = nullptr) {
    args.insert(args.begin(), {PDSERVE_BINARY, "up", "--config", cfg, "--exe", "/bin/false", "--grace", "1",
                               "--ready-timeout", "20", "--log-dir", (dir_ / name).string()});
    err_ = (dir_ / (name + ".stderr")).string();
    UpProcess up(args, {}, err_);
    int rc = up.wait_exit(30);
    if (out) *out = up.out();
    return rc;
  }

  static fs::path dir_;
  std::vector<int> ports_;
  std::string err_;
};
fs::path Up::dir_;

TEST_F(Up, WithFakeRolesStopsOnSigint) { stop_with(SIGINT, true); }
TEST_F(Up, WithFakeRolesStopsOnSigterm) { stop_with(SIGTERM, true); }

TEST_F(Up, WithFakeRolesStopsAllWhenAChildDies) {
  auto up = start(true, "childdies");
  expect_ready(*up);
  auto kids = children_of(up->pid());
  ASSERT_EQ(kids.size(), 3u);
  // The second child started is decode.
  std::string cmdline = slurp("/proc/" + std::to_string(kids[0]) + "/cmdline");
  pid_t victim = -1;
  for (pid_t k : kids)
    if (slurp("/proc/" + std::to_string(k) + "/cmdline").find(std::to_string(ports_[2])) != std::string::npos &&
        slurp("/proc/" + std::to_string(k) + "/cmdline").find("router") == std::string::npos)
      victim = k;
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  EXPECT_EQ(up->wait_exit(30), 1);
  const std::string err = slurp(err_);
  EXPECT_NE(err.find("decode (pid " + std::to_string(victim) + ") killed by signal 9"), std::string::npos) << err;
  EXPECT_NE(err.find("---- last lines of"), std::string::npos) << err;
  expect_nothing_left(kids);
}

TEST_F(Up, RefusesBusyPortBeforeStartingAnything) {
  ports_ = {free_port()};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(ports_[0]));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  listen(fd, 1);
  UpProcess up({PDSERVE_BINARY, "up", "--model", (dir_ / "m").string(), "--port", std::to_string(ports_[0]),
                "--prefill-port", std::to_string(free_port()), "--decode-port", std::to_string(free_port()),
                "--bootstrap-port", std::to_string(free_port())},
               {}, (dir_ / "busy.stderr").string());
  EXPECT_EQ(up.wait_exit(30), 2);
  EXPECT_NE(slurp((dir_ / "busy.stderr").string())
                .find("pdserve up: port " + std::to_string(ports_[0]) + " (router port) on 127.0.0.1 is already in use"),
            std::string::npos)
      << slurp((dir_ / "busy.stderr").string());
  close(fd);
}

// With --config the file decides the ports, sizes, parallelism, device and extra arguments: a
// flag for one of them is refused at startup (exit 2, before any port or child), naming the flag
// and the key. --exe /bin/false makes a started child die at once, so a flag that slipped
// through shows as exit 1, not a hang.
TEST_F(Up, ConfigRefusesFlagsTheTopologyDecides) {
  const std::string cfg = write_topology("decides.env", (dir_ / "m").string());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--port", "39999"}, "--port is set by the topology file (ROUTER_PORT)"},
      {{"--host", "0.0.0.0"}, "--host is set by the topology file (BIND_HOST)"},
      {{"--prefill-port", "39998"}, "--prefill-port is set by the topology file (PREFILL_PORT)"},
      {{"--bootstrap-port", "39997"}, "--bootstrap-port is set by the topology file (BOOTSTRAP_PORT)"},
      {{"--decode-port", "39996"}, "--decode-port is set by the topology file (DECODE_PORT)"},
      {{"--page-size", "32"}, "--page-size is set by the topology file (PAGE_SIZE)"},
      {{"--chunk-size", "512"}, "--chunk-size is set by the topology file (CHUNK_SIZE)"},
      {{"--prefill-tp", "2"}, "--prefill-tp is set by the topology file (PREFILL_TP)"},
      {{"--prefill-pp", "2"}, "--prefill-pp is set by the topology file (PREFILL_PP)"},
      {{"--decode-tp", "2"}, "--decode-tp is set by the topology file (DECODE_TP)"},
      {{"--device", "cuda"}, "--device is set by the topology file (GPUS_PER_NODE"},
      {{"--max-running", "4"}, "--max-running is set by the topology file (PREFILL_MAX_RUNNING / DECODE_MAX_RUNNING)"},
      {{"--prefill-arg=--max-queue=8"}, "--prefill-arg is set by the topology file (PREFILL_EXTRA_ARGS)"},
      {{"--decode-arg=--max-queue=8"}, "--decode-arg is set by the topology file (DECODE_EXTRA_ARGS)"},
      {{"--router-arg=--verbose"}, "--router-arg is set by the topology file (ROUTER_EXTRA_ARGS)"},
  };
  for (const auto& [flag, want] : cases) {
    std::string out;
    EXPECT_EQ(run_up(cfg, flag, "decides", &out), 2) << flag[0] << ": " << out << slurp(err_);
    const std::string err = slurp(err_);
    EXPECT_NE(err.find("pdserve up --config " + cfg + ": " + want), std::string::npos) << err;
    EXPECT_NE(err.find("drop the flag or edit the file"), std::string::npos) << err;
    EXPECT_EQ(out.find("starting"), std::string::npos) << out;
  }
  // Every such flag is named, not only the first.
  EXPECT_EQ(run_up(cfg, {"--port", "39999", "--page-size", "32"}, "decides2"), 2);
  const std::string err = slurp(err_);
  EXPECT_NE(err.find("--port is set"), std::string::npos) << err;
  EXPECT_NE(err.find("--page-size is set"), std::string::npos) << err;
}

TEST_F(Up, ConfigModelAndKvCacheDtypeStillOverrideTheFile) {
  // The file names no model: only the --model override makes the preflight pass.
  const std::string cfg = write_topology("override.env", (dir_ / "no-such-model").string());
  std::string out;
  EXPECT_EQ(run_up(cfg, {"--model", (dir_ / "m").string(), "--kv-cache-dtype", "bfloat16"}, "override", &out), 1)
      << out << slurp(err_);
  EXPECT_NE(out.find("pdserve up: starting prefill: /bin/false prefill"), std::string::npos) << out;
  EXPECT_NE(out.find("--model " + (dir_ / "m").string()), std::string::npos) << out;
  EXPECT_NE(out.find("--kv-cache-dtype bfloat16"), std::string::npos) << out;
  EXPECT_EQ(slurp(err_).find("is set by the topology file"), std::string::npos) << slurp(err_);
}

// The real roles: prefill + decode + router, a chat request through the router, SIGINT.
// Skips until `pdserve prefill` and `pdserve decode` exist (issue 5).
TEST_F(Up, RealRolesServeAChatAndStopCleanly) {
  const std::string bin = PDSERVE_BINARY;
  // CLI11 answers `pdserve prefill --help` with the top-level help, so look at the listing.
  if (exe_status(bin + " --help | grep -Eq '^ +prefill ' && " + bin + " --help | grep -Eq '^ +decode '") != 0)
    GTEST_SKIP() << "this pdserve has no prefill/decode subcommands yet; the test runs once they land";
  auto up = start(false, "real");
  expect_ready(*up);
  auto kids = children_of(up->pid());
  EXPECT_EQ(kids.size(), 3u);
  httplib::Client cli("127.0.0.1", ports_[0]);
  cli.set_read_timeout(120, 0);
  auto r = cli.Post("/v1/chat/completions",
                    R"({"messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"temperature":0})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("\"completion_tokens\":8"), std::string::npos) << r->body;
  kill(up->pid(), SIGINT);
  EXPECT_EQ(up->wait_exit(60), 0) << up->out() << slurp(err_);
  expect_nothing_left(kids);
}

// The roles' help is what an operator reads first: `--kv-cache-dtype` must not say it is
// CPU-only (the CUDA backend takes bfloat16 too, docs/operations.md "The MLA cache's dtype").
TEST(RoleHelp, KvCacheDtypeIsDescribedForBothDevicesOnEveryRole) {
  for (const char* role : {"serve", "prefill", "decode"}) {
    const std::string cmd = std::string(PDSERVE_BINARY) + " " + role + " --help 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string help;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) help.append(buf, n);
    pclose(p);
    const size_t at = help.find("--kv-cache-dtype");
    ASSERT_NE(at, std::string::npos) << role << ":\n" << help;
    // The option's text runs to the next option ("\n  --").
    const std::string text = help.substr(at, help.find("\n  --", at) - at);
    EXPECT_NE(text.find("float32 or bfloat16"), std::string::npos) << role << ": " << text;
    EXPECT_EQ(text.find("cpu for now"), std::string::npos) << role << ": " << text;
    EXPECT_NE(text.find("cuda"), std::string::npos) << role << ": " << text;
  }
}

}  // namespace
