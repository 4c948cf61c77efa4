// pdserve up --model DIR: prefill + decode + router on this host as child processes. Waits
// until each answers /health, prints where to send requests, and stops them all (router,
// then decode, then prefill) on SIGINT/SIGTERM or as soon as one of them dies; then exits
// 0 for a requested stop and 1 when a child failed. Children log to --log-dir.
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "pdserve/deploy/preflight.h"
#include "pdserve/deploy/supervisor.h"
#include "pdserve/deploy/topology.h"
#include "topology_args.h"

namespace pdserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct UpArgs {
  std::string model, config, host = "127.0.0.1", log_dir, exe;
  int router_port = 31000, prefill_port = 30000, decode_port = 30001, bootstrap_port = 8998;
  int64_t page_size = 64, chunk_size = 8192, max_running = 0;
  int prefill_tp = 1, decode_tp = 1, prefill_pp = 1;
  std::string device = "cpu";  // both roles
  std::string kv_cache_dtype;  // both roles; "": the topology's (or the roles' default, float32)
  double ready_timeout_s = 600, grace_s = 10;
  std::vector<std::string> prefill_args, decode_args, router_args;
};

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : p.string();
}

bool healthy(const std::string& url) {
  // url: http://HOST:PORT
  httplib::Client cli(url);
  cli.set_connection_timeout(1, 0);
  cli.set_read_timeout(2, 0);
  auto r = cli.Get("/health");
  return r && r->status == 200;
}

// The address a local client uses for a URL the topology wrote with a bind-all host.
std::string client_url(const std::string& url) {
  for (const char* any : {"0.0.0.0", "[::]"})
    if (auto p = url.find(any); p != std::string::npos) return url.substr(0, p) + "127.0.0.1" + url.substr(p + strlen(any));
  return url;
}

class Up {
 public:
  explicit Up(UpArgs a) : a_(std::move(a)) {}

  int run() {
    auto t = topology();
    if (!t.is_ok()) return fail(t.status().message());
    // The cheap checks first: a busy port or a broken model is one line, not a dead child.
    std::vector<std::string> problems = deploy::model_dir_problems(t->model_path);
    for (auto [port, key] : {std::pair{t->prefill.port, "prefill port"}, {t->bootstrap_port, "bootstrap port"},
                             {t->decode.port, "decode port"}, {t->router_port, "router port"}})
      if (Status st = deploy::check_port_free(t->bind_host, port, key); !st.is_ok()) problems.push_back(st.message());
    for (const auto& p : problems) std::cerr << "pdserve up: " << p << "\n";
    if (!problems.empty()) return 2;
    if (a_.log_dir.empty()) a_.log_dir = default_log_dir();
    std::filesystem::create_directories(a_.log_dir);
    std::cout << "pdserve up: logs in " << a_.log_dir << std::endl;

    sup_.set_grace_s(a_.grace_s);
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a_.ready_timeout_s));
    // Prefill and decode start together; the router once both answer, so its first checks pass.
    for (deploy::Role role : {deploy::Role::kPrefill, deploy::Role::kDecode})
      if (int rc = start(*t, role); rc >= 0) return rc;
    if (int rc = await_ready(deadline); rc >= 0) return rc;
    if (int rc = start(*t, deploy::Role::kRouter); rc >= 0) return rc;
    if (int rc = await_ready(deadline); rc >= 0) return rc;

    const std::string url = client_url(urls_.back().second);
    std::cout << "pdserve: listening on " << url << "\n"
              << "pdserve up: ready. OpenAI API at " << url << "/v1 (chat: " << url << "/v1/chat/completions)\n"
              << "pdserve up: prefill " << urls_[0].second << ", decode " << urls_[1].second
              << "; Ctrl-C stops all" << std::endl;
    for (;;) {
      auto ev = sup_.wait(3600);
      if (ev.kind != deploy::Supervisor::Event::kTimeout) return finish(ev);
    }
  }

 private:
  Result<deploy::Topology> topology() {
    if (!a_.config.empty()) {
      PDS_ASSIGN_OR_RETURN(deploy::Topology t, deploy::load_topology(a_.config));
      if (t.prefill.nodes.size() != 1 || t.decode.nodes.size() != 1 || t.prefill.nodes[0] != t.decode.nodes[0])
        return invalid_argument(a_.config + ": pdserve up runs one prefill and one decode on one host; "
                                "use scripts/deploy_pd.sh for this topology");
      if (!a_.model.empty()) t.model_path = a_.model;
      if (!a_.kv_cache_dtype.empty()) t.kv_cache_dtype = a_.kv_cache_dtype;
      return t;
    }
    if (a_.model.empty()) return invalid_argument("--model DIR or --config FILE is required");
    deploy::Topology t = deploy::one_host_topology(a_.model);
    t.bind_host = a_.host;
    t.prefill.nodes = t.decode.nodes = {a_.host};
    t.router_port = a_.router_port;
    t.prefill.port = a_.prefill_port;
    t.decode.port = a_.decode_port;
    t.bootstrap_port = a_.bootstrap_port;
    t.prefill.page_size = t.decode.page_size = a_.page_size;
    t.kv_cache_dtype = a_.kv_cache_dtype;
    t.prefill.tp = a_.prefill_tp;
    if (a_.prefill_pp > 1 && a_.device == "cuda" && a_.prefill_tp > 1)
      return invalid_argument("--prefill-pp " + std::to_string(a_.prefill_pp) + " with --prefill-tp " + std::to_string(a_.prefill_tp) +
                              ": on --device cuda a pipeline stage is one GPU (--prefill-tp 1) for now");
    t.prefill.pp = a_.prefill_pp;
    t.decode.tp = a_.decode_tp;
    t.chunk_size = a_.chunk_size;
    t.prefill.max_running = t.decode.max_running = a_.max_running;
    t.prefill.extra_args = a_.prefill_args;
    t.decode.extra_args = a_.decode_args;
    if (a_.device != "cpu")
      for (auto* extra : {&t.prefill.extra_args, &t.decode.extra_args}) extra->insert(extra->begin(), "--device=" + a_.device);
    t.router_extra_args = a_.router_args;
    PDS_RETURN_IF_ERROR(deploy::validate_topology(t));
    return t;
  }

  static std::string default_log_dir() {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    return (std::filesystem::temp_directory_path() / ("pdserve-up-" + std::string(stamp) + "-" + std::to_string(getpid())))
        .string();
  }

  // Returns -1 when started, else the exit code.
  int start(const deploy::Topology& t, deploy::Role role) {
    auto specs = deploy::launch_specs(t, role);
    if (!specs.is_ok()) return fail(specs.status().message());
    const deploy::LaunchSpec& s = specs->front();
    deploy::ChildSpec c;
    c.name = deploy::role_name(role);
    c.argv = {a_.exe.empty() ? self_exe() : a_.exe};
    c.argv.insert(c.argv.end(), s.args.begin(), s.args.end());
    c.env = s.env;
    c.log_path = a_.log_dir + "/" + c.name + ".log";
    std::cout << "pdserve up: starting " << c.name << ": " << deploy::shell_join(c.argv) << std::endl;
    auto pid = sup_.spawn(c);
    if (!pid.is_ok()) return fail(pid.status().message());
    urls_.push_back({c.name, s.url});
    logs_[c.name] = c.log_path;
    pending_.push_back(client_url(s.url));
    return -1;
  }

  // Waits until every pending URL is healthy; -1 when they are, else the exit code.
  int await_ready(Clock::time_point deadline) {
    while (!pending_.empty()) {
      if (healthy(pending_.front())) {
        pending_.erase(pending_.begin());
        continue;
      }
      if (Clock::now() > deadline) {
        std::cerr << "pdserve up: " << pending_.front() << " not healthy after " << a_.ready_timeout_s
                  << " s (--ready-timeout); stopping\n";
        for (const auto& [name, log] : logs_) show_log(name, log);
        stop_all();
        return 1;
      }
      auto ev = sup_.wait(0.2);
      if (ev.kind != deploy::Supervisor::Event::kTimeout) return finish(ev);
    }
    return -1;
  }

  int finish(const deploy::Supervisor::Event& ev) {
    int rc = 0;
    if (ev.kind == deploy::Supervisor::Event::kSignal) {
      std::cout << "pdserve up: " << strsignal(ev.signal) << ", stopping" << std::endl;
    } else {
      std::cerr << "pdserve up: " << ev.exit.name << " (pid " << ev.exit.pid << ") " << ev.exit.describe()
                << "; stopping the others\n";
      show_log(ev.exit.name, logs_[ev.exit.name]);
      rc = 1;
    }
    if (!stop_all()) rc = 1;
    return rc;
  }

  bool stop_all() {
    bool clean = true;
    for (const auto& e : sup_.stop_all(a_.grace_s)) {
      std::cout << "pdserve up: " << e.name << " " << e.describe() << std::endl;
      clean = clean && e.clean();
    }
    return clean;
  }

  static void show_log(const std::string& name, const std::string& log) {
    std::cerr << "---- last lines of " << log << " (" << name << ") ----\n" << deploy::tail_lines(log, 20) << "----\n";
  }

  int fail(const std::string& msg) {
    std::cerr << "pdserve up: " << msg << "\n";
    stop_all();
    return 2;
  }

  UpArgs a_;
  deploy::Supervisor sup_;  // blocks the stop signals from here on (before any thread exists)
  std::vector<std::pair<std::string, std::string>> urls_;
  std::vector<std::string> pending_;
  std::map<std::string, std::string> logs_;
};

// With --config the topology file decides these; a flag given beside it would be ignored, so
// up refuses it, naming the key that decides (--model and --kv-cache-dtype override the file).
const std::pair<const char*, const char*> kTopologyDecides[] = {
    {"--host", "BIND_HOST"},
    {"--port", "ROUTER_PORT"},
    {"--prefill-port", "PREFILL_PORT"},
    {"--bootstrap-port", "BOOTSTRAP_PORT"},
    {"--decode-port", "DECODE_PORT"},
    {"--page-size", "PAGE_SIZE"},
    {"--chunk-size", "CHUNK_SIZE"},
    {"--prefill-tp", "PREFILL_TP"},
    {"--prefill-pp", "PREFILL_PP"},
    {"--decode-tp", "DECODE_TP"},
    {"--device", "GPUS_PER_NODE, or a --device in PREFILL_EXTRA_ARGS / DECODE_EXTRA_ARGS"},
    {"--max-running", "PREFILL_MAX_RUNNING / DECODE_MAX_RUNNING"},
    {"--prefill-arg", "PREFILL_EXTRA_ARGS"},
    {"--decode-arg", "DECODE_EXTRA_ARGS"},
    {"--router-arg", "ROUTER_EXTRA_ARGS"},
};

// One line per such flag given on the command line; empty when there is none.
std::vector<std::string> flags_the_topology_decides(const CLI::App& cmd, const std::string& config) {
  std::vector<std::string> out;
  for (auto [flag, key] : kTopologyDecides)
    if (flag_given(cmd, flag))
      out.push_back("up --config " + config + ": " + flag + " is set by the topology file (" + key +
                    "); drop the flag or edit the file");
  return out;
}

}  // namespace

void add_up_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("up", "One host: start prefill, decode and the router; stop all on Ctrl-C");
  auto a = std::make_shared<UpArgs>();
  cmd->add_option("--model", a->model, "Model directory");
  add_config_option(cmd, &a->config)
      ->description("A one-host topology file instead of the flags below (--model and --kv-cache-dtype override it; the flags it decides are refused)");
  cmd->add_option("--host", a->host, "Address every role listens on")->capture_default_str();
  cmd->add_option("--port", a->router_port, "Router port (where requests go)")->capture_default_str();
  cmd->add_option("--prefill-port", a->prefill_port, "Prefill HTTP port")->capture_default_str();
  cmd->add_option("--bootstrap-port", a->bootstrap_port, "Prefill bootstrap port")->capture_default_str();
  cmd->add_option("--decode-port", a->decode_port, "Decode HTTP port")->capture_default_str();
  cmd->add_option("--page-size", a->page_size, "Tokens per KV page (both sides)")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", a->kv_cache_dtype, "MLA latent cache dtype of both sides: float32 (default) or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--chunk-size", a->chunk_size, "Prefill chunk size")->capture_default_str();
  cmd->add_option("--prefill-tp", a->prefill_tp, "Prefill tensor-parallel ranks (with --device cuda: GPUs 0..N-1)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--prefill-pp", a->prefill_pp, "Prefill pipeline stages of --prefill-tp ranks each (--device cuda: one GPU a stage, --prefill-tp 1)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--decode-tp", a->decode_tp, "Decode tensor-parallel ranks (with --device cuda: GPUs 0..N-1)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--device", a->device, "Backend of both roles")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--max-running", a->max_running, "Requests running at once per side (0: the role's default)")
      ->capture_default_str();
  cmd->add_option("--prefill-arg", a->prefill_args, "Extra argument for prefill (repeatable)")->allow_extra_args(false);
  cmd->add_option("--decode-arg", a->decode_args, "Extra argument for decode (repeatable)")->allow_extra_args(false);
  cmd->add_option("--router-arg", a->router_args, "Extra argument for the router (repeatable)")->allow_extra_args(false);
  cmd->add_option("--ready-timeout", a->ready_timeout_s, "Seconds to wait for every role's /health")->capture_default_str();
  cmd->add_option("--grace", a->grace_s, "Seconds between SIGTERM and SIGKILL when stopping")->capture_default_str();
  cmd->add_option("--log-dir", a->log_dir, "Where the roles' logs go (default: a new directory under $TMPDIR)");
  cmd->add_option("--exe", a->exe, "Executable the roles run (default: this pdserve; for tests)")->group("");
  cmd->callback([a, cmd] {
    if (!a->config.empty()) {
      const auto refused = flags_the_topology_decides(*cmd, a->config);
      for (const auto& line : refused) std::cerr << "pdserve " << line << "\n";
      if (!refused.empty()) std::exit(2);
    }
    int rc = Up(*a).run();
    std::exit(rc);
  });
}

}  // namespace pdserve::cli
