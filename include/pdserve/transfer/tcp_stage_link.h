// Activations between pipeline stages on different nodes for the CPU backend (`--pp` with
// `--nnodes`, `--device cpu`; docs/design.md, "Pipeline stages on several nodes"). Stages are
// whole on a node, so only boundary b (node b's last stage -> node b + 1's first stage)
// crosses the network: one TCP connection per boundary and TP rank. Every connection is made
// to node 0's hub, whose port and token travel in the authenticated Hello (as the TCP
// collectives' do): boundary 0's links end there; for a boundary between two followers both
// ends connect and the hub copies the bytes across (one hop more, and no follower listens).
//
// Wire, per micro-batch: code i32 (0: activations, else the sender's ErrorCode), text length
// u32, float count u64, the text, the floats. Exactly one message per micro-batch, as the
// in-process channel: a stage that cannot produce one sends its failure instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/model/pipeline.h"
#include "pdserve/transfer/tcp_collective.h"

namespace pdserve::transfer {

// Which end of a boundary's link a connection is.
enum class StageLinkSide : uint8_t { kSender = 0, kReceiver = 1 };

class TcpStageHub {
 public:
  static Result<std::unique_ptr<TcpStageHub>> listen(const std::string& host);
  ~TcpStageHub();
  uint16_t port() const { return port_; }
  const CollectiveToken& token() const { return token_; }
  // Accepts every link of an instance of `nnodes` nodes with `tp` ranks per stage (connections
  // without the token, or naming a link twice, are dropped). Returns node 0's sending ends of
  // boundary 0, index = TP rank (sockets the caller owns), and relays every other boundary.
  Result<std::vector<int>> accept_links(int nnodes, int tp, std::chrono::milliseconds timeout);

 private:
  TcpStageHub() = default;
  int fd_ = -1;
  uint16_t port_ = 0;
  CollectiveToken token_{};
  std::vector<int> relayed_;  // both ends of every relayed link
  std::vector<std::thread> relays_;
};

// A follower's end of link (boundary, rank, side); returns the connected socket (the caller
// owns it). The hub need not have accepted yet (the listen backlog holds it).
Result<int> connect_stage_link(const std::string& host, uint16_t port, const CollectiveToken& token, int boundary, int rank,
                               StageLinkSide side, std::chrono::milliseconds timeout);

// A StageChannel over one connected socket (owned): stage `stage` of `num_stages` sends to or
// receives from `peer` only.
std::unique_ptr<StageChannel> make_tcp_stage_channel(int fd, int stage, int peer, int num_stages);

}  // namespace pdserve::transfer
