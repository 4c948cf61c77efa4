// The prefill and decode roles' own settings (the runtime's are in RuntimeConfig).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"

namespace pdserve::disagg {

struct DisaggConfig {
  // Prefill: the bootstrap server (decode looks the layout up and hands over targets here).
  std::string bootstrap_host = "127.0.0.1";
  int bootstrap_port = 8998;
  // Decode: where its transfer listener is reached by prefill (0: any free port).
  std::string transfer_host = "127.0.0.1";
  int transfer_port = 0;
  int transfer_streams = 4;          // TCP connections per peer
  double bootstrap_timeout_s = 300;  // prefill: longest wait for decode's target
  double waiting_timeout_s = 300;    // decode: longest wait for a room's KV
  double heartbeat_interval_s = 5;   // decode -> each prefill bootstrap server
  int heartbeat_misses = 2;          // then every room waiting on that prefill fails
  double release_wait_s = 5;         // prefill: an aborted room's sends get this long to end
  // Hash every transferred unit on both sides and refuse a room whose sums differ. Both sides
  // must agree (it is part of the pair check); turning it off trades safety for CPU time.
  bool checksum = true;
  // "tcp", "rdma" or "auto". rdma never falls back; auto says at startup what it chose and why.
  std::string transfer_backend = "auto";
  // RDMA NICs ("mlx5_0", "mlx5_1:2"; empty: none) and the GID index to use on them (-1: prefer
  // RoCE v2 IPv4-mapped). Read by the transport policy (transfer/rdma/transport_policy.h).
  std::vector<std::string> rdma_nics;
  int rdma_gid_index = -1;
  // Decode: prefill bootstrap servers ("host:port") to handshake with and self-test a real
  // transfer against before /health says ok (so no user request pays for endpoint setup).
  std::vector<std::string> prefill_peers;
  double selftest_retry_s = 1.0;
  // Decode: when not empty, the only prefill bootstrap servers ("host:port", compared as the
  // strings the router sends in bootstrap_host / bootstrap_port) this server accepts rooms
  // from, looks layouts up at and posts aborts to. Any other address is a 400 naming
  // bootstrap_host, before any connection. Must hold every entry of prefill_peers.
  std::vector<std::string> allowed_prefills;
  // The shared secret that authenticates the bootstrap requests and the transfer connections
  // (docs/disaggregation.md). Only the file is configured; HttpServer::create reads it into
  // cluster_secret, which is never printed. Empty file name and secret: no authentication.
  std::string cluster_secret_file;
  std::string cluster_secret;

  Status validate() const;  // names the bad field
  // Decode: may a room name this prefill bootstrap server? (Always, with no allowlist.)
  bool prefill_allowed(const std::string& host, int port) const;
  Json to_json() const;
};

}  // namespace pdserve::disagg
