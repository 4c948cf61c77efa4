// One model instance over several nodes (--nnodes N): node 0 (the leader) runs the HTTP
// server and the scheduler; nodes 1..N-1 (followers) run no server and execute, step by step,
// the batches the leader sends over the control stream (transfer/node_control.h), their
// ranks meeting the leader's in the collectives (TCP collectives with --device cpu, NCCL with
// --device cuda). Each node runs tp / N ranks: global ranks node_rank * (tp / N) + i.
// Every role: with `prefill` / `decode` node 0 is also the instance's only transfer endpoint
// and moves the other nodes' share of each request's cache over the control stream
// (src/server/node_cache.h; docs/design.md, "Prefill and decode across nodes").
// With --pp P > 1 node n runs whole pipeline stages instead (src/server/node_pipeline.h).
//
// Lost node: the leader's group breaks for good (TpModelGroup::health); in-flight requests
// fail with that error, /health answers 503 and new /v1 requests are refused with it. The
// instance must be restarted as a whole: the lost node's caches are gone. A node lost during
// a step: TpModelGroup::lose_node aborts the local NCCL collectives, so the step fails instead
// of waiting for ever. A follower whose leader went away (end of the control stream without a
// shutdown frame, between or during steps) exits 1.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pdserve/model/tp_group.h"
#include "pdserve/server/serve_config.h"
#include "pdserve/transfer/node_link.h"
#include "pdserve/transfer/tcp_stage_link.h"

namespace pdserve::server {

// What one node runs of an instance (cfg.node_rank of cfg.nnodes; a one-node instance runs all).
// --pp 1: tensor-parallel ranks first_rank .. first_rank + ranks - 1 of --tp. --pp P: whole
// stages first_stage .. first_stage + stages - 1 of P, each of all --tp ranks (first_rank 0).
// With --device cuda a node needs stages x ranks GPUs, local stage s / rank r on GPU s x ranks +
// r; CUDA stages (--tp 1) join one NCCL group whose rank is the global stage number.
struct NodeShare {
  int first_stage = 0, stages = 1;
  int first_rank = 0, ranks = 1;
  int gpus() const { return stages * ranks; }
};
NodeShare node_share(const ServeConfig& cfg);  // cfg must have passed validate()

class NodeLeader {
 public:
  // Listens on --dist-init-addr, waits for every follower, hands out how the ranks meet (the
  // TCP collective address or the NCCL id) and loads this node's ranks into *group.
  static Result<std::unique_ptr<NodeLeader>> join(const ServeConfig& cfg, std::unique_ptr<TpModelGroup>* group);
  // Once the engine made the pools: tells the followers their geometry, joins the GPUs (cuda),
  // waits until every follower is ready, then hooks the step sender into the group.
  Status start(TpModelGroup& group, const ServeConfig& cfg);
  // Tells the followers to exit (0); after the engine stopped.
  void shutdown(const std::string& reason);
  ~NodeLeader();

 private:
  NodeLeader() = default;
  // --pp 1: the step sender and the roles' cache moves of the other nodes' ranks.
  void hook_tensor_parallel(TpModelGroup& g, const ServeConfig& cfg);
  std::shared_ptr<transfer::node::LeaderLink> link_;
  std::vector<uint8_t> group_id_;  // cuda: the NCCL unique id (of the TP ranks, or with --pp of the stages)
  std::unique_ptr<transfer::TcpStageHub> stage_hub_;  // --pp > 1 on cpu: the stage links (node_pipeline.h)
  int nnodes_ = 1;
  bool shut_ = false;
};

// `serve --nnodes N --node-rank R` with R > 0: the follower's whole life; the exit status.
int run_node_follower(const ServeConfig& cfg);

}  // namespace pdserve::server
