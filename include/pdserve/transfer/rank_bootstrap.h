// How the ranks of a tensor-parallel group on several nodes learn the group's NCCL unique id
// (128 opaque bytes made by rank 0's ncclGetUniqueId). Plain TCP, no NCCL here, so it is
// tested on any machine:
//   rank 0 listens; every other rank connects and the two talk:
//   server -> client: Ns (16 random bytes)
//   client -> server: rank (u32 LE), Nc (16 bytes), MAC_c
//   server -> client: status (u8: 0 ok, 1 refused), then on ok: id, MAC_s
//   MAC_c = HMAC(secret, "pdserve-rank-join" || Ns || Nc || rank)
//   MAC_s = HMAC(secret, "pdserve-rank-id" || Nc || Ns || id)
// Each side proves it holds the cluster secret on the other's fresh nonce (a recorded
// exchange cannot be replayed), and the id a rank receives is bound to its own nonce. Without
// a secret both MACs are 32 zero bytes and are not checked (single-host tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::transfer {

struct RankBootstrapConfig {
  std::string secret;                                // cluster secret; empty: unauthenticated
  std::chrono::milliseconds timeout{30000};          // the whole exchange, per side
  int world_size = 1;                                // ranks including rank 0
};

// Rank 0's side: listens on host:port (0 picks one) and serves `id` to world_size - 1 ranks.
class RankBootstrapServer {
 public:
  static Result<std::unique_ptr<RankBootstrapServer>> listen(const std::string& host, uint16_t port, RankBootstrapConfig cfg);
  ~RankBootstrapServer();
  uint16_t port() const { return port_; }
  // Blocks until every other rank (1..world_size-1, each once) got the id, or the timeout
  // passes. Connections with a wrong MAC, a bad or repeated rank are refused and do not count.
  Status serve(const std::vector<uint8_t>& id);
  // Ranks refused so far (for tests and logs).
  int refused() const { return refused_; }

 private:
  RankBootstrapServer() = default;
  int fd_ = -1;
  uint16_t port_ = 0;
  int refused_ = 0;
  RankBootstrapConfig cfg_;
};

// A rank > 0: connects to rank 0 (retrying until the timeout: rank 0 may start later) and
// returns the id. kInvalidArgument (naming the address) when rank 0 refuses us or its answer
// fails the MAC: a configuration error, so retrying does not help.
Result<std::vector<uint8_t>> fetch_rank_id(const std::string& host, uint16_t port, int rank, const RankBootstrapConfig& cfg);

}  // namespace pdserve::transfer
