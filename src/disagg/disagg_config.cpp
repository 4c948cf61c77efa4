#include "pdserve/disagg/disagg_config.h"

#include "pdserve/transfer/rdma/nic_config.h"

#include <algorithm>

namespace pdserve::disagg {

namespace {
// "host:port" with a non-empty host and a port in [1, 65535].
bool is_host_port(const std::string& p) {
  const size_t colon = p.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == p.size() || p.size() - colon - 1 > 5 ||
      p.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    return false;
  const int port = std::stoi(p.substr(colon + 1));
  return port >= 1 && port <= 65535;
}
}  // namespace

Status DisaggConfig::validate() const {
  auto bad = [](const char* field, const std::string& what) { return invalid_argument(std::string(field) + ": " + what); };
  if (bootstrap_port < 0 || bootstrap_port > 65535) return bad("bootstrap_port", "must be in [0, 65535] (0: any free port)");
  if (transfer_port < 0 || transfer_port > 65535) return bad("transfer_port", "must be in [0, 65535] (0: any free port)");
  if (bootstrap_host.empty()) return bad("bootstrap_host", "must not be empty");
  if (transfer_host.empty()) return bad("transfer_host", "must not be empty");
  if (transfer_streams < 1 || transfer_streams > 64) return bad("transfer_streams", "must be in [1, 64]");
  if (!(bootstrap_timeout_s > 0)) return bad("bootstrap_timeout_s", "must be positive");
  if (!(waiting_timeout_s > 0)) return bad("waiting_timeout_s", "must be positive");
  if (!(heartbeat_interval_s > 0)) return bad("heartbeat_interval_s", "must be positive");
  if (heartbeat_misses < 1) return bad("heartbeat_misses", "must be at least 1");
  if (!(release_wait_s > 0)) return bad("release_wait_s", "must be positive");
  if (transfer_backend != "tcp" && transfer_backend != "rdma" && transfer_backend != "auto")
    return bad("transfer_backend", "must be tcp, rdma or auto (got '" + transfer_backend + "')");
  if (auto nics = transfer::rdma::parse_nic_list(rdma_nics); !nics.is_ok()) return bad("rdma_nics", nics.status().message());
  if (rdma_gid_index < -1 || rdma_gid_index > 255) return bad("rdma_gid_index", "must be -1 (automatic) or 0..255");
  for (const std::string& p : prefill_peers)
    if (!is_host_port(p)) return bad("prefill_peers", "'" + p + "' is not HOST:PORT (port 1-65535)");
  for (const std::string& p : allowed_prefills)
    if (!is_host_port(p)) return bad("allowed_prefills", "'" + p + "' is not HOST:PORT (port 1-65535)");
  if (!allowed_prefills.empty())
    for (const std::string& p : prefill_peers)
      if (std::find(allowed_prefills.begin(), allowed_prefills.end(), p) == allowed_prefills.end())
        return bad("prefill_peers", "'" + p + "' is not among allowed_prefills (--allow-prefill): its self-test could never run");
  if (!(selftest_retry_s > 0)) return bad("selftest_retry_s", "must be positive");
  return Status::ok();
}

bool DisaggConfig::prefill_allowed(const std::string& host, int port) const {
  if (allowed_prefills.empty()) return true;
  const std::string key = host + ":" + std::to_string(port);
  return std::find(allowed_prefills.begin(), allowed_prefills.end(), key) != allowed_prefills.end();
}

Json DisaggConfig::to_json() const {
  return Json{{"bootstrap_host", bootstrap_host},
              {"bootstrap_port", bootstrap_port},
              {"transfer_host", transfer_host},
              {"transfer_port", transfer_port},
              {"transfer_streams", transfer_streams},
              {"bootstrap_timeout_s", bootstrap_timeout_s},
              {"waiting_timeout_s", waiting_timeout_s},
              {"heartbeat_interval_s", heartbeat_interval_s},
              {"heartbeat_misses", heartbeat_misses},
              {"release_wait_s", release_wait_s},
              {"checksum", checksum},
              {"transfer_backend", transfer_backend},
              {"prefill_peers", prefill_peers},
              {"allowed_prefills", allowed_prefills},
              {"rdma_nics", rdma_nics},
              {"rdma_gid_index", rdma_gid_index},
              {"cluster_secret_file", cluster_secret_file},
              {"authenticated", !cluster_secret.empty()}};
}

}  // namespace pdserve::disagg
