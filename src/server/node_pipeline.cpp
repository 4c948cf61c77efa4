// Pipeline stages on several nodes: loading a node's stages, their links, and node 0's hooks
// (node_pipeline.h).
#include "node_pipeline.h"

#include <algorithm>
#include <atomic>

#include <spdlog/spdlog.h>

#include "cuda_options.h"
#include "node_cache.h"
#include "pdserve/model/cuda_node_stages.h"
#include "pdserve/server/node_serving.h"

namespace pdserve::server {

namespace node = transfer::node;

namespace {

const uint8_t* bytes(const node::Frame& f) { return reinterpret_cast<const uint8_t*>(f.payload.data()); }

node::Step to_message(const ForwardBatch& batch, uint64_t step) {
  node::Step m;
  m.step = step;
  for (const SequenceInput& s : batch.seqs) m.seqs.push_back({s.cached_len, s.state_slot, s.all_logits, s.tokens, s.pages});
  return m;
}

}  // namespace

Result<std::unique_ptr<TpModelGroup>> load_node_stages(const ServeConfig& cfg) {
  const NodeShare share = node_share(cfg);
  return TpModelGroup::load_stage_models(cfg.model_dir, cfg.tp, cfg.pp, share.first_stage, share.stages);
}

Status join_stage_gpus(TpModelGroup& g, const ServeConfig& cfg, const std::vector<uint8_t>& group_id) {
  std::vector<std::shared_ptr<const Model>> stages;
  for (int s = 0; s < g.pp(); ++s) stages.push_back(g.stage_model_ptr(s, 0));
  PDS_ASSIGN_OR_RETURN(auto devs, make_cuda_node_pp_forwards(stages, group_id, cfg.pp, g.first_stage(), g.kv(0).num_pages(), g.kv(0).page_size(),
                                                             g.state(0).num_slots(),
                                                             cuda_forward_options(cfg, g.kv(0).pages_for_tokens(cfg.runtime.max_model_len))));
  for (const auto& d : devs) spdlog::info("device: {}", d->describe());
  return g.set_device_forwards(std::move(devs));
}

Status link_leader_stages(TpModelGroup& g, transfer::TcpStageHub& hub, const ServeConfig& cfg, std::chrono::milliseconds timeout) {
  PDS_ASSIGN_OR_RETURN(std::vector<int> fds, hub.accept_links(cfg.nnodes, cfg.tp, timeout));
  const int last = node_share(cfg).stages - 1;
  std::vector<std::unique_ptr<StageChannel>> down;
  for (int fd : fds) down.push_back(transfer::make_tcp_stage_channel(fd, last, last + 1, cfg.pp));
  return g.link_stages({}, std::move(down));
}

void hook_leader_pipeline(TpModelGroup& g, const std::shared_ptr<node::LeaderLink>& link, const ServeConfig& cfg,
                          std::chrono::milliseconds timeout) {
  auto steps = std::make_shared<std::atomic<uint64_t>>(0);
  // Every follower answers each step with kRound: replies, not a node speaking out of turn.
  g.set_step_sender([link, steps](const ForwardBatch& batch) {
    link->expect_replies(true);
    return link->broadcast(node::encode(to_message(batch, steps->fetch_add(1))));
  });
  const int nnodes = cfg.nnodes;
  g.set_round_collector([link, nnodes](const ForwardBatch& batch, std::vector<TpModelGroup::RemoteRound>* remote) -> Status {
    struct Done {
      node::LeaderLink& l;
      ~Done() { l.expect_replies(false); }
    } done{*link};
    for (int n = 1; n < nnodes; ++n) {
      const std::string who = "node " + std::to_string(n) + " of " + std::to_string(nnodes);
      TpModelGroup::RemoteRound got;
      for (bool more = true; more;) {
        // No deadline: a follower's stages take as long as the step's prompt needs; a follower
        // that dies ends its control stream, which fails this read at once.
        PDS_ASSIGN_OR_RETURN(node::Frame f, link->receive_from(n, std::chrono::milliseconds(0)));
        if (f.type != node::MsgType::kRound)
          return Status(ErrorCode::kDataLoss, who + " answered a step with frame type " + std::to_string(static_cast<int>(f.type)));
        PDS_ASSIGN_OR_RETURN(node::Round r, node::decode_round(bytes(f), f.payload.size()));
        if (r.seqs.size() != batch.seqs.size())
          return Status(ErrorCode::kDataLoss, who + " reported on " + std::to_string(r.seqs.size()) + " of " + std::to_string(batch.seqs.size()) + " sequences");
        got.seq_status = std::move(r.seqs);
        got.logits.insert(got.logits.end(), r.logits.begin(), r.logits.end());
        more = r.more;
      }
      remote->push_back(std::move(got));
    }
    return Status::ok();
  });
  if (cfg.role == ServerRole::kPrefill)
    g.set_cache_fetcher([link, &g, nnodes, timeout](const CacheRegion& region) { return fetch_stage_region(*link, g, nnodes, region, timeout); });
}

Status link_follower_stages(TpModelGroup& g, const ServeConfig& cfg, const std::string& host, uint16_t port,
                            const transfer::CollectiveToken& token, std::chrono::milliseconds timeout) {
  const int first = g.first_stage(), last = first + g.pp() - 1;
  std::vector<std::unique_ptr<StageChannel>> up, down;
  for (int r = 0; r < cfg.tp; ++r) {
    // Boundary b runs from node b to node b + 1: this node receives on b = node_rank - 1.
    PDS_ASSIGN_OR_RETURN(int in, transfer::connect_stage_link(host, port, token, cfg.node_rank - 1, r, transfer::StageLinkSide::kReceiver, timeout));
    up.push_back(transfer::make_tcp_stage_channel(in, first, first - 1, cfg.pp));
    if (g.holds_last_stage()) continue;
    PDS_ASSIGN_OR_RETURN(int out, transfer::connect_stage_link(host, port, token, cfg.node_rank, r, transfer::StageLinkSide::kSender, timeout));
    down.push_back(transfer::make_tcp_stage_channel(out, last, last + 1, cfg.pp));
  }
  return g.link_stages(std::move(up), std::move(down));
}

Status send_round(node::FollowerLink& link, const TpModelGroup& g, const ForwardOutput& out) {
  node::Round r;
  r.seqs = out.seq_status;
  const size_t total = g.holds_last_stage() ? out.logits.size() : 0;
  // Many rows of a large vocabulary (prompt logprobs) span several frames.
  size_t at = 0;
  do {
    const size_t n = std::min(node::kRoundLogits, total - at);
    r.logits.assign(out.logits.begin() + at, out.logits.begin() + at + n);
    at += n;
    r.more = at < total;
    PDS_RETURN_IF_ERROR(link.send(node::encode(r)));
  } while (at < total);
  return Status::ok();
}

}  // namespace pdserve::server
