// pdserve router --pd --prefill URL[@BOOTSTRAP_PORT]... --decode URL... [--port 31000]
// pdserve router --worker URL... [--policy round_robin]
// Runs until SIGINT / SIGTERM. See docs/router.md.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "commands.h"
#include "pdserve/deploy/topology.h"
#include "pdserve/router/router.h"
#include "topology_args.h"

namespace pdserve::cli {
namespace {

struct RouterArgs {
  router::RouterConfig cfg;
  bool pd = false;
  std::string policy = "round_robin", prefill_policy = "least_outstanding", decode_policy = "least_outstanding";
  std::string log_level = "info";
  std::string config;  // topology file: PD mode with its prefill and decode URLs
};

// Flags win over the file, as for every role.
Status apply_topology(const CLI::App& cmd, RouterArgs& a) {
  PDS_ASSIGN_OR_RETURN(deploy::Topology t, deploy::load_topology(a.config));
  if (!flag_given(cmd, "--worker")) a.pd = true;
  if (!flag_given(cmd, "--prefill")) a.cfg.prefill = deploy::prefill_urls(t);
  if (!flag_given(cmd, "--decode")) a.cfg.decode = deploy::decode_urls(t);
  if (!flag_given(cmd, "--host")) a.cfg.host = t.bind_host;
  if (!flag_given(cmd, "--port")) a.cfg.port = t.router_port;
  if (!flag_given(cmd, "--cluster-secret-file")) a.cfg.cluster_secret_file = t.cluster_secret_file;
  return Status::ok();
}

[[noreturn]] void fail(const std::string& msg) {
  std::cerr << "pdserve router: " << msg << '\n';
  throw CLI::RuntimeError(1);
}

Status run(RouterArgs& a) {
  a.cfg.mode = a.pd ? router::RouterMode::kPd : router::RouterMode::kDp;
  PDS_ASSIGN_OR_RETURN(a.cfg.dp_policy, router::parse_policy(a.policy));
  PDS_ASSIGN_OR_RETURN(a.cfg.prefill_policy, router::parse_policy(a.prefill_policy));
  PDS_ASSIGN_OR_RETURN(a.cfg.decode_policy, router::parse_policy(a.decode_policy));
  if (a.cfg.api_key.empty())
    if (const char* k = std::getenv("PDSERVE_ROUTER_API_KEY")) a.cfg.api_key = k;
  if (a.cfg.worker_api_key.empty())
    if (const char* k = std::getenv("PDSERVE_WORKER_API_KEY")) a.cfg.worker_api_key = k;
  spdlog::set_level(spdlog::level::from_str(a.log_level));

  // Block the stop signals before any thread exists, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client hanging up mid-stream is an error value, not a crash

  PDS_ASSIGN_OR_RETURN(auto r, router::Router::create(a.cfg));
  PDS_RETURN_IF_ERROR(r->start());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  // Drain: no new requests; in-flight ones get drain_timeout_s. A second signal exits at once.
  spdlog::info("router: signal {}, draining {} request(s) (up to {} s; a second signal exits at once)", sig,
               r->in_flight(), a.cfg.drain_timeout_s);
  r->begin_drain();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.cfg.drain_timeout_s);
  while (r->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    timespec tick{0, 50'000'000};
    const int again = sigtimedwait(&stop_signals, nullptr, &tick);
    if (again > 0) {
      spdlog::warn("router: signal {} while draining: exiting now", again);
      std::fflush(nullptr);
      std::_Exit(128 + again);
    }
  }
  if (r->in_flight() > 0) spdlog::warn("router: drain timeout: cancelling {} request(s)", r->in_flight());
  else spdlog::info("router: drained; stopping");
  r->stop();
  return Status::ok();
}

}  // namespace

void add_router_command(CLI::App& app) {
  auto a = std::make_shared<RouterArgs>();
  auto& c = a->cfg;
  CLI::App* cmd = app.add_subcommand("router", "Load balancer: DP over unified replicas, or PD prefill/decode pairs");
  cmd->add_flag("--pd", a->pd, "Prefill/decode mode (needs --prefill and --decode)");
  cmd->add_option("--worker", c.workers, "DP: a unified server URL (repeatable)");
  cmd->add_option("--prefill", c.prefill, "PD: a prefill server URL[@BOOTSTRAP_PORT] (default bootstrap port 8998)");
  cmd->add_option("--decode", c.decode, "PD: a decode server URL (repeatable)");
  cmd->add_option("--host", c.host, "Listen address")->capture_default_str();
  cmd->add_option("--port", c.port, "Listen port")->capture_default_str();
  cmd->add_option("--policy", a->policy, "DP policy: round_robin|random|power_of_two|least_outstanding")
      ->capture_default_str();
  cmd->add_option("--prefill-policy", a->prefill_policy, "PD prefill policy")->capture_default_str();
  cmd->add_option("--decode-policy", a->decode_policy, "PD decode policy")->capture_default_str();
  cmd->add_option("--health-interval", c.health.interval_s, "Seconds between health checks")->capture_default_str();
  cmd->add_option("--health-timeout", c.health.timeout_s, "Health check timeout, seconds")->capture_default_str();
  cmd->add_option("--health-failure-threshold", c.health.failure_threshold,
                  "Consecutive failed checks that evict a worker")->capture_default_str();
  cmd->add_option("--health-success-threshold", c.health.success_threshold,
                  "Consecutive good checks that bring it back")->capture_default_str();
  cmd->add_option("--health-path", c.health.path, "Health check path")->capture_default_str();
  cmd->add_option("--max-in-flight", c.max_in_flight, "Client requests served at once; past it 503")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", c.max_body_bytes, "Largest request body; past it 413")->capture_default_str();
  cmd->add_option("--request-timeout", c.request_timeout_s, "Seconds a request may take end to end")
      ->capture_default_str();
  cmd->add_option("--connect-timeout", c.connect_timeout_s, "Seconds to connect to a worker")->capture_default_str();
  cmd->add_option("--max-connect-retries", c.max_connect_retries, "Other workers tried when connecting fails")
      ->capture_default_str();
  cmd->add_option("--api-key", c.api_key, "Require 'Authorization: Bearer KEY' on /v1/* (or PDSERVE_ROUTER_API_KEY)");
  cmd->add_option("--worker-api-key", c.worker_api_key,
                  "Send 'Authorization: Bearer KEY' to the workers (or PDSERVE_WORKER_API_KEY); the client's is never forwarded");
  cmd->add_option("--cluster-secret-file", c.cluster_secret_file,
                  "PD: the daemons' cluster secret file; signs the /abort the router sends a prefill whose decode is "
                  "unreachable");
  cmd->add_option("--drain-timeout", c.drain_timeout_s, "On SIGTERM/SIGINT: seconds in-flight requests get to finish")
      ->capture_default_str();
  cmd->add_option("--log-level", a->log_level, "trace|debug|info|warn|error")->capture_default_str();
  add_config_option(cmd, &a->config);
  cmd->callback([a, cmd] {
    Status st = a->config.empty() ? Status::ok() : apply_topology(*cmd, *a);
    if (st.is_ok()) st = run(*a);
    if (!st.is_ok()) fail(st.to_string());
  });
}

}  // namespace pdserve::cli
