// TCP transport: host memory, several connections per peer, payload sent from and received
// into the registered regions directly. See docs/transfer.md for the protocol.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "pdserve/transfer/transport.h"
#include "pdserve/transfer/wire.h"

namespace pdserve::transfer {

struct TcpConfig {
  std::string listen_host = "127.0.0.1";  // the address peers reach; "0.0.0.0" listens everywhere
  uint16_t listen_port = 0;               // 0: pick a free port (see local_address())
  int streams_per_peer = 4;               // connections per peer; large writes are split across them
  uint64_t min_stripe_bytes = 256 * 1024; // a write is split only into pieces at least this big
  int max_outstanding_batches = 64;       // per peer; submit() beyond it is kResourceExhausted
  std::chrono::milliseconds connect_timeout{5000};
  // A message stalled this long mid-way (either direction) drops the connection.
  std::chrono::milliseconds io_timeout{30000};
  wire::Limits limits;
  // The cluster secret. Non-empty: every connection is authenticated both ways in its hello
  // (HMAC-SHA256 challenge-response, docs/transfer.md) and a peer without it is refused
  // before any write is read. Empty (the default): no authentication; production configs
  // should set it (--cluster-secret-file).
  std::string secret;

  Status validate() const;
};

Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config);

}  // namespace pdserve::transfer
