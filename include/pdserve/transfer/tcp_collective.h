// Collectives across processes for the CPU backend (an instance over several nodes with
// --device cpu, e.g. two processes on one host in tests): a star around global rank 0.
// Every other rank holds one TCP connection to rank 0; for an all-reduce each sends its
// values, rank 0 adds them in rank order (0 + r0 + r1 + ..., the in-process group's order,
// so the bits equal a one-process group's) and sends the sum back; an all-gather is the same
// with concatenation. Speed is not the point (the CPU backend is the reference); equality
// and clean failure are.
//
// Failure: a peer that vanishes (end-of-stream, reset) or answers out of step breaks the
// communicator for good: rank 0 then shuts every connection so the other ranks wake too,
// every collective since returns zeros at once, and health() names
// the cause. The model forward cannot stop mid-layer, so it finishes with garbage and
// TpModelGroup::forward turns health() into the step's error.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/model/parallel.h"

namespace pdserve::transfer {

using CollectiveToken = std::array<uint8_t, 16>;

// Rank 0's side: listen first (host, port 0 = any), hand the port and a fresh token to the
// other nodes, then accept_ranks() builds rank 0's communicator once ranks 1..world-1 have
// each connected with the token.
class TcpCollectiveListener {
 public:
  static Result<std::unique_ptr<TcpCollectiveListener>> listen(const std::string& host, int world_size);
  ~TcpCollectiveListener();
  uint16_t port() const { return port_; }
  const CollectiveToken& token() const { return token_; }
  Result<std::unique_ptr<Communicator>> accept_ranks(std::chrono::milliseconds timeout);

 private:
  TcpCollectiveListener() = default;
  int fd_ = -1;
  uint16_t port_ = 0;
  int world_ = 1;
  CollectiveToken token_{};
};

// A rank > 0: connects to rank 0 and presents the token.
Result<std::unique_ptr<Communicator>> connect_tcp_collective(const std::string& host, uint16_t port, int rank, int world_size,
                                                             const CollectiveToken& token, std::chrono::milliseconds timeout);

}  // namespace pdserve::transfer
