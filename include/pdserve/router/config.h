// `pdserve router` configuration: one struct, validated once at startup.
// A bad value is refused with its field named ("router: health.timeout_s must be > 0, got 0").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::router {

enum class RouterMode { kDp, kPd };  // DP: unified replicas. PD: prefill + decode pairs.
enum class WorkerRole { kUnified, kPrefill, kDecode };
enum class PolicyKind { kRoundRobin, kRandom, kPowerOfTwo, kLeastOutstanding };

const char* role_name(WorkerRole role);
const char* policy_name(PolicyKind kind);
Result<PolicyKind> parse_policy(const std::string& name);  // "round_robin", "random", ...

// One worker address. `spec` is what the user typed: http://host:port[@bootstrap_port].
struct WorkerAddress {
  std::string url;   // normalised "http://host:port", no trailing slash
  std::string host;
  int port = 0;
  int bootstrap_port = 8998;  // prefill only: where its bootstrap server listens
};
// allow_bootstrap_port: only prefill URLs may carry "@PORT".
Result<WorkerAddress> parse_worker_address(const std::string& spec, bool allow_bootstrap_port);

struct HealthConfig {
  // SMG uses 60 s; 10 s evicts a dead worker within ~30 s while connect retries cover the gap.
  double interval_s = 10.0;
  int failure_threshold = 3;  // consecutive failed checks before a worker leaves the rotation
  int success_threshold = 2;  // consecutive good checks before it returns
  double timeout_s = 5.0;
  std::string path = "/health";
};

struct RouterConfig {
  RouterMode mode = RouterMode::kDp;
  std::string host = "0.0.0.0";
  int port = 31000;  // 0: any free port (tests)

  std::vector<std::string> workers;  // DP: unified servers
  std::vector<std::string> prefill;  // PD: URL[@BOOTSTRAP_PORT]
  std::vector<std::string> decode;   // PD

  PolicyKind dp_policy = PolicyKind::kRoundRobin;
  PolicyKind prefill_policy = PolicyKind::kLeastOutstanding;
  PolicyKind decode_policy = PolicyKind::kLeastOutstanding;

  HealthConfig health;
  int max_in_flight = 256;               // past it: 503 with an OpenAI-style body
  int64_t max_body_bytes = 32ll << 20;   // request bodies above it: 413
  double request_timeout_s = 1800.0;     // whole request, and the longest silence from a worker
  double connect_timeout_s = 3.0;
  int max_connect_retries = 2;           // other workers tried when connecting fails
  std::string api_key;                   // empty: no auth; else "Authorization: Bearer KEY" on /v1/*
  // Sent to workers as "Authorization: Bearer KEY" (their --api-key). The client's own
  // Authorization header is never forwarded: it is the router's credential, not theirs.
  std::string worker_api_key;
  double drain_timeout_s = 30.0;         // SIGTERM: in-flight requests get this long to finish
  int max_idle_connections = 64;         // kept-alive connections per worker
  // PD: the daemons' --cluster-secret-file. When a pair's decode cannot be reached, the router
  // posts /abort for the room to the prefill's bootstrap server, so prefill frees it at once
  // instead of waiting out its --bootstrap-timeout; with a secret those posts are signed.
  // Empty: unsigned (accepted only by daemons that run without a secret).
  std::string cluster_secret_file;
  std::string cluster_secret;  // read from cluster_secret_file at startup; never printed
};

// Checks every field and every worker URL; the message names the first bad one.
Status validate(const RouterConfig& cfg);

}  // namespace pdserve::router
