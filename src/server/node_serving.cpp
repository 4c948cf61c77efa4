// The leader's and the followers' halves of an instance over several nodes (node_serving.h).
#include "pdserve/server/node_serving.h"

#include <atomic>
#include <mutex>
#include <iostream>

#include <spdlog/spdlog.h>

#include "cuda_options.h"
#include "node_cache.h"
#include "node_pipeline.h"
#include "pdserve/core/secret_file.h"
#include "pdserve/model/device_forward.h"
#include "pdserve/model/dist_check.h"
#include "pdserve/transfer/dist_init.h"
#include "pdserve/transfer/tcp_collective.h"

namespace pdserve::server {

namespace node = transfer::node;

namespace {

// How long the leader waits for the followers (and they for it) to start and load.
std::chrono::milliseconds join_timeout(const ServeConfig& cfg) { return std::chrono::milliseconds(static_cast<int64_t>(cfg.dist_timeout_s * 1000)); }

// --device cuda: the host shards never run a forward (the device forwards make the NCCL
// collectives), but Model::load wants a communicator of the rank's place in the group.
class DeviceOnlyRank final : public Communicator {
 public:
  DeviceOnlyRank(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, int64_t) override { used_ = true; }
  void all_gather(const float*, int64_t, float*) override { used_ = true; }
  Status health() const override {
    return used_ ? internal_error("a host collective ran on a --device cuda rank of a multi-node instance") : Status::ok();
  }

 private:
  int rank_, size_;
  std::atomic<bool> used_{false};
};

Result<std::string> cluster_secret(const ServeConfig& cfg) {
  if (cfg.disagg.cluster_secret_file.empty()) return std::string();
  return read_secret_file(cfg.disagg.cluster_secret_file);
}

uint8_t role_code(ServerRole r) { return r == ServerRole::kPrefill ? 1 : r == ServerRole::kDecode ? 2 : 0; }
const char* role_command(uint8_t code) { return code == 1 ? "prefill" : code == 2 ? "decode" : "serve"; }

std::vector<std::shared_ptr<const Model>> shards_of(const TpModelGroup& g) {
  std::vector<std::shared_ptr<const Model>> shards;
  for (int r = 0; r < g.size(); ++r) shards.push_back(g.model_ptr(r));
  return shards;
}

// --device cuda, once the pools are made: this node's GPUs join the leader's NCCL group `id`.
Status join_gpus(TpModelGroup& g, const ServeConfig& cfg, const std::vector<uint8_t>& id) {
  if (cfg.pp > 1) return join_stage_gpus(g, cfg, id);
  PDS_ASSIGN_OR_RETURN(auto devs, make_cuda_node_tp_forwards(shards_of(g), id, cfg.tp, node_share(cfg).first_rank, g.kv(0).num_pages(),
                                                             g.kv(0).page_size(), g.state(0).num_slots(),
                                                             cuda_forward_options(cfg, g.kv(0).pages_for_tokens(cfg.runtime.max_model_len))));
  for (const auto& d : devs) spdlog::info("device: {}", d->describe());
  return g.set_device_forwards(std::move(devs));
}

node::Step to_message(const ForwardBatch& batch, uint64_t step) {
  node::Step m;
  m.step = step;
  for (const SequenceInput& s : batch.seqs) m.seqs.push_back({s.cached_len, s.state_slot, s.all_logits, s.tokens, s.pages});
  return m;
}

ForwardBatch to_batch(node::Step&& m) {
  ForwardBatch b;
  for (node::StepSeq& s : m.seqs) {
    SequenceInput in;
    in.tokens = std::move(s.tokens);
    in.cached_len = s.cached_len;
    in.pages = std::move(s.pages);
    in.state_slot = s.slot;
    in.all_logits = s.all_logits;
    b.seqs.push_back(std::move(in));
  }
  return b;
}

// The follower's side of a lost leader. Between steps the main loop's receive() sees the end
// of the control stream itself; during a step the ranks may sit in a collective waiting for
// the dead leader's ranks (NCCL would wait for ever), so the link's watcher breaks the group,
// which aborts them, and the step fails.
class LeaderWatch {
 public:
  explicit LeaderWatch(TpModelGroup& g) : g_(g) {}
  void lost(const Status& why) {
    std::lock_guard<std::mutex> l(mu_);
    gone_ = why;
    if (in_step_) g_.lose_node(why);
  }
  // Not ok: the leader is gone already (do not start a step it will never meet).
  Status begin_step() {
    std::lock_guard<std::mutex> l(mu_);
    if (!gone_.is_ok()) return gone_;
    in_step_ = true;
    return Status::ok();
  }
  void end_step() {
    std::lock_guard<std::mutex> l(mu_);
    in_step_ = false;
  }

 private:
  TpModelGroup& g_;
  std::mutex mu_;
  bool in_step_ = false;
  Status gone_ = Status::ok();
};

}  // namespace

NodeShare node_share(const ServeConfig& cfg) {
  NodeShare s;
  if (cfg.pp > 1) {  // whole stages per node, every TP rank of each
    s.stages = cfg.pp / cfg.nnodes;
    s.first_stage = cfg.node_rank * s.stages;
    s.ranks = cfg.tp;
  } else {
    s.ranks = cfg.tp / cfg.nnodes;
    s.first_rank = cfg.node_rank * s.ranks;
  }
  return s;
}

Result<std::unique_ptr<NodeLeader>> NodeLeader::join(const ServeConfig& cfg, std::unique_ptr<TpModelGroup>* group) {
  PDS_ASSIGN_OR_RETURN(std::string secret, cluster_secret(cfg));
  PDS_ASSIGN_OR_RETURN(transfer::HostPort hp, transfer::parse_dist_init_addr(cfg.dist_init_addr));
  std::unique_ptr<NodeLeader> l(new NodeLeader());
  l->nnodes_ = cfg.nnodes;
  PDS_ASSIGN_OR_RETURN(auto link, node::LeaderLink::listen(hp.host, hp.port, cfg.nnodes, secret));
  l->link_ = std::move(link);
  spdlog::info("node 0 of {}: waiting for {} node(s) on --dist-init-addr {}", cfg.nnodes, cfg.nnodes - 1, cfg.dist_init_addr);
  PDS_RETURN_IF_ERROR(l->link_->accept_followers(join_timeout(cfg)));
  node::Hello hello;
  hello.nnodes = static_cast<uint32_t>(cfg.nnodes);
  hello.tp = static_cast<uint32_t>(cfg.tp);
  hello.role = role_code(cfg.role);
  hello.pp = static_cast<uint32_t>(cfg.pp);
  if (cfg.device == "cuda") {
    // The NCCL group the GPUs join in start(): the TP ranks, or with --pp the stages.
    PDS_ASSIGN_OR_RETURN(l->group_id_, cuda_nccl_unique_id());
    hello.group_id = l->group_id_;
  }
  if (cfg.pp > 1) {
    // Whole stages per node: the TP collectives stay in each process and only activations
    // cross: on cpu through the stage links' hub here (its port and token in Hello), on cuda
    // over the stages' NCCL group (the id in Hello).
    if (cfg.device != "cuda") {
      PDS_ASSIGN_OR_RETURN(l->stage_hub_, transfer::TcpStageHub::listen(hp.host));
      hello.collective_port = l->stage_hub_->port();
      hello.token = l->stage_hub_->token();
    }
    PDS_RETURN_IF_ERROR(l->link_->broadcast(node::encode(hello)));
    PDS_ASSIGN_OR_RETURN(*group, load_node_stages(cfg));
    return l;
  }
  const int local = node_share(cfg).ranks;
  std::vector<std::unique_ptr<Communicator>> comms;
  if (cfg.device == "cuda") {
    for (int i = 0; i < local; ++i) comms.push_back(std::make_unique<DeviceOnlyRank>(i, cfg.tp));
    PDS_RETURN_IF_ERROR(l->link_->broadcast(node::encode(hello)));
  } else {
    // Rank 0's collective listener on the leader's address; the token keeps strangers out.
    PDS_ASSIGN_OR_RETURN(auto listener, transfer::TcpCollectiveListener::listen(hp.host, cfg.tp));
    hello.collective_port = listener->port();
    hello.token = listener->token();
    PDS_RETURN_IF_ERROR(l->link_->broadcast(node::encode(hello)));
    comms.resize(static_cast<size_t>(local));
    for (int i = 1; i < local; ++i) {  // queued in the listen backlog until rank 0 accepts
      PDS_ASSIGN_OR_RETURN(comms[i], transfer::connect_tcp_collective(hp.host, listener->port(), i, cfg.tp, listener->token(), join_timeout(cfg)));
    }
    PDS_ASSIGN_OR_RETURN(comms[0], listener->accept_ranks(join_timeout(cfg)));
  }
  PDS_ASSIGN_OR_RETURN(*group, TpModelGroup::load_node_models(cfg.model_dir, cfg.tp, 0, std::move(comms)));
  return l;
}

Status NodeLeader::start(TpModelGroup& g, const ServeConfig& cfg) {
  PDS_RETURN_IF_ERROR(link_->broadcast(node::encode(node::Start{g.kv(0).num_pages(), g.kv(0).page_size(), g.state(0).num_slots(),
                                                                    static_cast<uint8_t>(g.kv(0).dtype() == DType::kBF16)})));
  if (cfg.device == "cuda") PDS_RETURN_IF_ERROR(join_gpus(g, cfg, group_id_));
  if (stage_hub_) PDS_RETURN_IF_ERROR(link_leader_stages(g, *stage_hub_, cfg, join_timeout(cfg)));
  PDS_ASSIGN_OR_RETURN(auto frames, link_->receive_from_all(join_timeout(cfg)));
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::string who = "node " + std::to_string(i + 1) + " of " + std::to_string(nnodes_);
    if (frames[i].type != node::MsgType::kReady) return internal_error(who + ": expected its ready message");
    auto ready = node::decode_ready(reinterpret_cast<const uint8_t*>(frames[i].payload.data()), frames[i].payload.size());
    if (!ready.is_ok()) return Status(ready.status().code(), who + ": " + ready.status().message());
    const ModelConfig& mc = g.config();
    if (ready->vocab_size != mc.vocab_size || ready->num_layers != mc.num_layers)
      return invalid_argument(who + " loaded another model (vocabulary " + std::to_string(ready->vocab_size) + ", " +
                              std::to_string(ready->num_layers) + " layers; here " + std::to_string(mc.vocab_size) + ", " +
                              std::to_string(mc.num_layers) + "): pass the same --model to every node");
  }
  if (cfg.pp > 1) {
    spdlog::info("node 0 of {}: every node is ready; pipeline stages 0..{} of {} here", nnodes_, g.pp() - 1, g.total_stages());
    hook_leader_pipeline(g, link_, cfg, join_timeout(cfg));
  } else {
    spdlog::info("node 0 of {}: every node is ready; ranks 0..{} here", nnodes_, g.size() - 1);
    hook_tensor_parallel(g, cfg);
  }
  // A follower lost between steps: refuse the next step instead of waiting for it in a
  // collective (which NCCL would do for ever); lost during a step: lose_node aborts the NCCL
  // collectives the step is blocked in, so it fails with the same error.
  link_->watch([&g](const Status& why) {
    spdlog::error("{}", why.message());
    g.lose_node(why);
  });
  return Status::ok();
}

void NodeLeader::hook_tensor_parallel(TpModelGroup& g, const ServeConfig& cfg) {
  auto steps = std::make_shared<std::atomic<uint64_t>>(0);
  g.set_step_sender([link = link_, steps](const ForwardBatch& batch) { return link->broadcast(node::encode(to_message(batch, steps->fetch_add(1)))); });
  if (cfg.role == ServerRole::kDecode) {
    // Prefill sends every global rank's share here; the other nodes get theirs from us.
    g.make_remote_pools(cfg.tp);
    g.set_cache_forwarder([link = link_, &g, local = node_share(cfg).ranks](const CacheRegion& region) { return forward_region(*link, g, local, region); });
  } else if (cfg.role == ServerRole::kPrefill) {
    // The send to decode reads every global rank's share here; the other nodes send theirs.
    g.make_remote_pools(cfg.tp);
    g.set_cache_fetcher([link = link_, &g, local = node_share(cfg).ranks, t = join_timeout(cfg)](const CacheRegion& region) {
      return fetch_region(*link, g, local, region, t);
    });
  }
}

void NodeLeader::shutdown(const std::string& reason) {
  if (shut_) return;
  shut_ = true;
  link_->stop_watching();  // the followers are about to leave on purpose
  (void)link_->broadcast(node::encode(node::Shutdown{reason}));
}

NodeLeader::~NodeLeader() { shutdown("the leader is stopping"); }

int run_node_follower(const ServeConfig& cfg) {
  const std::string who = "serve: node " + std::to_string(cfg.node_rank) + " of " + std::to_string(cfg.nnodes);
  auto fail = [&](int rc, const std::string& m) {
    std::cerr << who << ": " << m << std::endl;
    return rc;
  };
  auto secret = cluster_secret(cfg);
  if (!secret.is_ok()) return fail(2, secret.status().message());
  auto hp = transfer::parse_dist_init_addr(cfg.dist_init_addr);
  if (!hp.is_ok()) return fail(2, hp.status().message());
  auto link = node::FollowerLink::connect(hp->host, hp->port, cfg.node_rank, *secret, join_timeout(cfg));
  if (!link.is_ok()) return fail(1, link.status().message());
  auto next = [&](node::MsgType want) -> Result<node::Frame> {
    PDS_ASSIGN_OR_RETURN(node::Frame f, (*link)->receive());
    if (f.type == node::MsgType::kShutdown) return Status(ErrorCode::kAborted, "the leader stopped before this node was ready");
    if (f.type != want) return Status(ErrorCode::kDataLoss, "the leader sent frame type " + std::to_string(static_cast<int>(f.type)) + " out of order");
    return f;
  };
  auto bytes = [](const node::Frame& f) { return reinterpret_cast<const uint8_t*>(f.payload.data()); };

  auto hf = next(node::MsgType::kHello);
  if (!hf.is_ok()) return fail(1, "joining the leader at " + cfg.dist_init_addr + ": " + hf.status().message());
  auto hello = node::decode_hello(bytes(*hf), hf->payload.size());
  if (!hello.is_ok()) return fail(1, hello.status().message());
  if (static_cast<int>(hello->nnodes) != cfg.nnodes || static_cast<int>(hello->tp) != cfg.tp || static_cast<int>(hello->pp) != cfg.pp)
    return fail(2, "the leader runs --pp " + std::to_string(hello->pp) + " --tp " + std::to_string(hello->tp) + " --nnodes " +
                       std::to_string(hello->nnodes) + ", this node was started with --pp " + std::to_string(cfg.pp) + " --tp " +
                       std::to_string(cfg.tp) + " --nnodes " + std::to_string(cfg.nnodes));
  if (hello->role != role_code(cfg.role))
    return fail(2, std::string("the leader runs `pdserve ") + role_command(hello->role) + "`, this node `pdserve " + role_command(role_code(cfg.role)) +
                       "`: start every node of an instance with the same command");
  if ((cfg.device == "cuda") != !hello->group_id.empty())
    return fail(2, std::string("the leader runs --device ") + (hello->group_id.empty() ? "cpu" : "cuda") + ", this node --device " + cfg.device +
                       ": start every node of an instance with the same --device");
  const bool staged = cfg.pp > 1;
  const NodeShare share = node_share(cfg);
  const int local = share.ranks, first = share.first_rank;
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int i = 0; i < local && !staged; ++i) {
    if (cfg.device == "cuda") {
      comms.push_back(std::make_unique<DeviceOnlyRank>(first + i, cfg.tp));
      continue;
    }
    auto c = transfer::connect_tcp_collective(hp->host, hello->collective_port, first + i, cfg.tp, hello->token, join_timeout(cfg));
    if (!c.is_ok()) return fail(1, "rank " + std::to_string(first + i) + ": " + c.status().message());
    comms.push_back(std::move(*c));
  }
  auto group = staged ? load_node_stages(cfg) : TpModelGroup::load_node_models(cfg.model_dir, cfg.tp, first, std::move(comms));
  if (!group.is_ok()) return fail(1, group.status().message());
  TpModelGroup& g = **group;
  if (staged && cfg.device != "cuda") {  // cuda stages pass activations over their NCCL group
    if (Status st = link_follower_stages(g, cfg, hp->host, hello->collective_port, hello->token, join_timeout(cfg)); !st.is_ok())
      return fail(1, "linking pipeline stages " + std::to_string(g.first_stage()) + ".." + std::to_string(g.first_stage() + g.pp() - 1) +
                         " to the others through the leader: " + st.message());
  }
  auto sf = next(node::MsgType::kStart);
  if (!sf.is_ok()) return fail(1, sf.status().message());
  auto start = node::decode_start(bytes(*sf), sf->payload.size());
  if (!start.is_ok()) return fail(1, start.status().message());
  g.make_pools(start->num_pages, start->page_size, start->num_slots, start->kv_bf16 ? DType::kBF16 : DType::kF32);
  if (cfg.device == "cuda") {
    if (Status st = join_gpus(g, cfg, hello->group_id); !st.is_ok()) return fail(1, st.message());
  }
  if (Status st = (*link)->send(node::encode(node::Ready{g.config().vocab_size, g.config().num_layers})); !st.is_ok())
    return fail(1, "the leader at " + cfg.dist_init_addr + " went away: " + st.message());
  std::cout << "pdserve: node " << cfg.node_rank << " of " << cfg.nnodes << " following the leader at " << cfg.dist_init_addr;
  if (staged)
    std::cout << " (pipeline stages " << g.first_stage() << ".." << g.first_stage() + g.pp() - 1 << " of " << cfg.pp << ", " << cfg.tp << " ranks each)" << std::endl;
  else
    std::cout << " (ranks " << first << ".." << first + local - 1 << " of " << cfg.tp << ")" << std::endl;

  LeaderWatch watch(g);
  (*link)->watch([&watch](const Status& why) { watch.lost(why); });
  struct StopWatching {  // before `watch` and the group go away
    node::FollowerLink& l;
    ~StopWatching() { l.stop_watching(); }
  } stop_watching{**link};

  uint64_t steps = 0;
  CacheRegion pending;  // decode role: kCache frames not yet uploaded (device forward)
  auto upload_pending = [&]() -> Status {
    if (pending.pages.empty() && pending.slot < 0) return Status::ok();
    Status st = g.cache_to_device(pending);
    pending = CacheRegion{};
    if (!st.is_ok()) return Status(st.code(), "uploading the cache prefill sent: " + st.message());
    return Status::ok();
  };
  while (true) {
    auto f = (*link)->receive();
    if (!f.is_ok()) {
      if (f.status().code() == ErrorCode::kUnavailable)
        return fail(1, "the leader at " + cfg.dist_init_addr + " went away (the control stream ended without a shutdown after " +
                           std::to_string(steps) + " steps: " + f.status().message() + ")");
      return fail(1, f.status().message());
    }
    if (f->type == node::MsgType::kShutdown) {
      auto m = node::decode_shutdown(bytes(*f), f->payload.size());
      std::cout << "pdserve: node " << cfg.node_rank << ": the leader shut the instance down (" << (m.is_ok() ? m->reason : "no reason")
                << ") after " << steps << " steps" << std::endl;
      return 0;
    }
    if (f->type == node::MsgType::kCache) {
      auto m = node::decode_cache(bytes(*f), f->payload.size());
      if (!m.is_ok()) return fail(1, m.status().message());
      // A region holds one slot: another request's state starts, so the last one is complete.
      if (m->kind == node::CacheData::kStateLayer && pending.slot >= 0 && pending.slot != m->id) {
        if (Status st = upload_pending(); !st.is_ok()) return fail(1, st.message());
      }
      if (Status st = apply_cache(g, first, *m, &pending); !st.is_ok()) return fail(1, st.message());
      continue;
    }
    if (f->type == node::MsgType::kFetch) {
      auto m = node::decode_fetch(bytes(*f), f->payload.size());
      if (!m.is_ok()) return fail(1, m.status().message());
      if (Status st = staged ? answer_stage_fetch(**link, g, *m) : answer_fetch(**link, g, first, *m); !st.is_ok()) return fail(1, "answering the leader's cache fetch: " + st.message());
      continue;
    }
    if (f->type != node::MsgType::kStep) return fail(1, "the leader sent frame type " + std::to_string(static_cast<int>(f->type)) + " mid-run");
    // Cache that arrived since the last step: onto the device before a step reads it.
    if (Status st = upload_pending(); !st.is_ok()) return fail(1, st.message());
    auto step = node::decode_step(bytes(*f), f->payload.size());
    if (!step.is_ok()) return fail(1, step.status().message());
    const uint64_t n = step->step;
    if (n != steps) return fail(1, "step " + std::to_string(n) + " arrived, expected step " + std::to_string(steps));
    ForwardOutput out;
    if (Status st = watch.begin_step(); !st.is_ok())
      return fail(1, "the leader at " + cfg.dist_init_addr + " went away before step " + std::to_string(n) + " (" + st.message() + ")");
    // Any failure leaves this node's caches behind the leader's: the instance cannot go on,
    // and exiting makes the leader's next collective fail instead of hanging.
    Status st = g.forward(to_batch(std::move(*step)), &out);
    watch.end_step();
    if (!st.is_ok()) return fail(1, "step " + std::to_string(n) + ": " + st.message());
    // Stages: this node's verdict on each sequence (and the last stage's logits) for the leader.
    if (staged) {
      if (Status sent = send_round(**link, g, out); !sent.is_ok())
        return fail(1, "the leader at " + cfg.dist_init_addr + " went away after step " + std::to_string(n) + ": " + sent.message());
    }
    ++steps;
  }
}

}  // namespace pdserve::server
