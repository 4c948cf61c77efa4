// Pipeline stages on several nodes (`--pp P --nnodes N`, docs/design.md "Pipeline stages on
// several nodes"): node n runs stages n * P/N .. (n + 1) * P/N - 1, each of --tp ranks in its
// process, so the tensor-parallel collectives stay inside a node and only the activations at
// the N - 1 node boundaries cross the network (transfer/tcp_stage_link.h with --device cpu;
// with --device cuda the stages' NCCL send/recv, one group over every node's stages).
// Node 0 holds stage 0 and is the instance's only HTTP and transfer endpoint; after each step
// every follower reports its stages' verdict on each sequence (kRound; the last stage's node
// adds the logits), and node 0 agrees over all stages (ready = intersection, failed = union).
#pragma once

#include <chrono>
#include <memory>

#include "pdserve/model/tp_group.h"
#include "pdserve/server/serve_config.h"
#include "pdserve/transfer/node_link.h"
#include "pdserve/transfer/tcp_stage_link.h"

namespace pdserve::server {

// The stages node `node_rank` runs, loaded from the model directory (only their layers).
Result<std::unique_ptr<TpModelGroup>> load_node_stages(const ServeConfig& cfg);

// --device cuda, once the pools are made: this node's stages on its GPUs (local stage i on GPU
// i), joined to every other node's through node 0's NCCL id `group_id` as ranks first_stage
// + i of the pipeline's group (node_share); the stage links and the hub are then unused.
Status join_stage_gpus(TpModelGroup& g, const ServeConfig& cfg, const std::vector<uint8_t>& group_id);

// Node 0, after the followers were told the hub's port and token in Hello: accepts every stage
// link and wires its last stage's into the group.
Status link_leader_stages(TpModelGroup& g, transfer::TcpStageHub& hub, const ServeConfig& cfg, std::chrono::milliseconds timeout);
// Node 0, once every follower is ready: the step sender, the round collector and (prefill)
// the cache fetcher of the other nodes' layers.
void hook_leader_pipeline(TpModelGroup& g, const std::shared_ptr<transfer::node::LeaderLink>& link, const ServeConfig& cfg,
                          std::chrono::milliseconds timeout);

// A follower: connects its stage links to node 0's hub and wires them into the group.
Status link_follower_stages(TpModelGroup& g, const ServeConfig& cfg, const std::string& host, uint16_t port,
                            const transfer::CollectiveToken& token, std::chrono::milliseconds timeout);
// A follower, after a step: its stages' verdicts (and with the last stage, the logits).
Status send_round(transfer::node::FollowerLink& link, const TpModelGroup& g, const ForwardOutput& out);

}  // namespace pdserve::server
