// One tensor-parallel group spread over several nodes: the flags that describe it
// (--nnodes N --node-rank R --dist-init-addr HOST:PORT, as deploy/topology.cpp emits them) and
// the hand-out of the group's NCCL unique id from node 0 (the leader) to the other nodes over
// the authenticated TCP exchange of rank_bootstrap.h. No NCCL here: the id maker is a
// callback, so the exchange is tested on any machine.
//
// The bootstrap's "rank" is the node rank: one connection per node, not per GPU. Every
// node's local GPUs then join NCCL as global ranks node_rank * gpus_per_node + local index.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::transfer {

struct DistInit {
  int nnodes = 1;          // nodes of this one instance
  int node_rank = 0;       // 0: the leader, which makes and hands out the id
  std::string addr;        // HOST:PORT where the leader's rank bootstrap listens
  bool multi_node() const { return nnodes > 1; }
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" or "[IPv6]:PORT", port 1..65535; errors name --dist-init-addr.
Result<HostPort> parse_dist_init_addr(const std::string& addr);

// The flags on their own and against the instance's tensor-parallel size `tp` (all nodes'
// GPUs together): R < N, tp divisible by N, an address when N > 1. Errors name the flag.
Status validate_dist_init(const DistInit& d, int tp);

// Node 0: make_id(), then serve it to nodes 1..N-1 (each once) until all have it or `timeout`
// passes; returns the id. Other nodes: fetch it from the leader, retrying until `timeout`
// (the leader may start later); the error names the address. `secret` empty: no
// authentication (single-host tests); otherwise both sides prove they hold it.
Result<std::vector<uint8_t>> share_group_id(const DistInit& d, const std::string& secret, std::chrono::milliseconds timeout,
                                            const std::function<Result<std::vector<uint8_t>>()>& make_id);

}  // namespace pdserve::transfer
