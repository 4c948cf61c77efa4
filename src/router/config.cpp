#include "pdserve/router/config.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

namespace pdserve::router {

const char* role_name(WorkerRole role) {
  switch (role) {
    case WorkerRole::kUnified: return "unified";
    case WorkerRole::kPrefill: return "prefill";
    case WorkerRole::kDecode: return "decode";
  }
  return "?";
}

const char* policy_name(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kRoundRobin: return "round_robin";
    case PolicyKind::kRandom: return "random";
    case PolicyKind::kPowerOfTwo: return "power_of_two";
    case PolicyKind::kLeastOutstanding: return "least_outstanding";
  }
  return "?";
}

Result<PolicyKind> parse_policy(const std::string& name) {
  for (PolicyKind k : {PolicyKind::kRoundRobin, PolicyKind::kRandom, PolicyKind::kPowerOfTwo,
                       PolicyKind::kLeastOutstanding}) {
    if (name == policy_name(k)) return k;
  }
  return invalid_argument("unknown policy '" + name +
                          "' (expected round_robin, random, power_of_two or least_outstanding)");
}

namespace {

Result<int> parse_port(const std::string& s, const std::string& what) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 1 || v > 65535)
    return invalid_argument(what + ": port must be 1..65535, got '" + s + "'");
  return v;
}

}  // namespace

Result<WorkerAddress> parse_worker_address(const std::string& spec, bool allow_bootstrap_port) {
  const std::string where = "worker URL '" + spec + "'";
  std::string rest = spec;
  WorkerAddress a;
  // "@PORT" after the authority names the prefill bootstrap port.
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    if (!allow_bootstrap_port) return invalid_argument(where + ": '@BOOTSTRAP_PORT' is only for --prefill URLs");
    PDS_ASSIGN_OR_RETURN(a.bootstrap_port, parse_port(rest.substr(at + 1), where + " bootstrap"));
    rest = rest.substr(0, at);
  }
  const std::string scheme = "http://";
  if (rest.rfind("https://", 0) == 0) return invalid_argument(where + ": https is not supported; use http://");
  if (rest.rfind(scheme, 0) == 0) rest = rest.substr(scheme.size());
  else if (rest.find("://") != std::string::npos) return invalid_argument(where + ": only http:// URLs are supported");
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return invalid_argument(where + ": a worker URL has no path");
  if (rest.empty()) return invalid_argument(where + ": no host");
  std::string host = rest, port = "80";
  if (rest.front() == '[') {  // [v6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos) return invalid_argument(where + ": unterminated IPv6 address");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return invalid_argument(where + ": expected ':' after ']'");
      port = rest.substr(close + 2);
    }
  } else if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument(where + ": no host");
  PDS_ASSIGN_OR_RETURN(a.port, parse_port(port, where));
  a.host = host;
  const bool v6 = host.find(':') != std::string::npos;
  a.url = "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(a.port);
  return a;
}

namespace {

Status check_positive(double v, const char* field) {
  if (!(v > 0) || !std::isfinite(v))
    return invalid_argument(std::string("router: ") + field + " must be > 0, got " + std::to_string(v));
  return Status::ok();
}

Status check_at_least(int64_t v, int64_t lo, const char* field) {
  if (v < lo)
    return invalid_argument(std::string("router: ") + field + " must be >= " + std::to_string(lo) + ", got " +
                            std::to_string(v));
  return Status::ok();
}

Status check_urls(const std::vector<std::string>& specs, const char* field, bool bootstrap) {
  std::set<std::string> seen;
  for (const auto& s : specs) {
    auto a = parse_worker_address(s, bootstrap);
    if (!a.is_ok()) return a.status().with_context(std::string("router: ") + field);
    if (!seen.insert(a->url).second)
      return invalid_argument(std::string("router: ") + field + ": " + a->url + " is listed twice");
  }
  return Status::ok();
}

}  // namespace

Status validate(const RouterConfig& c) {
  if (c.port < 0 || c.port > 65535) return invalid_argument("router: port must be 0..65535, got " + std::to_string(c.port));
  if (c.host.empty()) return invalid_argument("router: host is empty");
  if (c.mode == RouterMode::kDp) {
    if (c.workers.empty()) return invalid_argument("router: DP mode needs at least one --worker URL");
    if (!c.prefill.empty() || !c.decode.empty())
      return invalid_argument("router: --prefill/--decode need --pd (DP mode takes --worker)");
    PDS_RETURN_IF_ERROR(check_urls(c.workers, "workers", false));
  } else {
    if (c.prefill.empty()) return invalid_argument("router: PD mode needs at least one --prefill URL");
    if (c.decode.empty()) return invalid_argument("router: PD mode needs at least one --decode URL");
    if (!c.workers.empty()) return invalid_argument("router: --worker is for DP mode; PD takes --prefill and --decode");
    PDS_RETURN_IF_ERROR(check_urls(c.prefill, "prefill", true));
    PDS_RETURN_IF_ERROR(check_urls(c.decode, "decode", false));
  }
  PDS_RETURN_IF_ERROR(check_positive(c.health.interval_s, "health.interval_s"));
  PDS_RETURN_IF_ERROR(check_positive(c.health.timeout_s, "health.timeout_s"));
  PDS_RETURN_IF_ERROR(check_at_least(c.health.failure_threshold, 1, "health.failure_threshold"));
  PDS_RETURN_IF_ERROR(check_at_least(c.health.success_threshold, 1, "health.success_threshold"));
  if (c.health.path.empty() || c.health.path.front() != '/')
    return invalid_argument("router: health.path must start with '/', got '" + c.health.path + "'");
  PDS_RETURN_IF_ERROR(check_at_least(c.max_in_flight, 1, "max_in_flight"));
  PDS_RETURN_IF_ERROR(check_at_least(c.max_body_bytes, 1024, "max_body_bytes"));
  PDS_RETURN_IF_ERROR(check_positive(c.request_timeout_s, "request_timeout_s"));
  PDS_RETURN_IF_ERROR(check_positive(c.connect_timeout_s, "connect_timeout_s"));
  PDS_RETURN_IF_ERROR(check_at_least(c.max_connect_retries, 0, "max_connect_retries"));
  PDS_RETURN_IF_ERROR(check_at_least(c.max_idle_connections, 0, "max_idle_connections"));
  if (!(c.drain_timeout_s >= 0)) return invalid_argument("router: drain_timeout_s must be >= 0");
  for (const auto* key : {&c.api_key, &c.worker_api_key})
    for (char ch : *key)
      if (std::isspace(static_cast<unsigned char>(ch)) || !std::isprint(static_cast<unsigned char>(ch)))
        return invalid_argument(std::string("router: ") + (key == &c.api_key ? "api_key" : "worker_api_key") +
                                " must be printable ASCII without spaces");
  return Status::ok();
}

}  // namespace pdserve::router
