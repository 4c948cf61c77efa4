// The cache of the disaggregation roles between the nodes of one instance (node_cache.h).
#include "node_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace pdserve::server {

namespace node = transfer::node;

namespace {

using Send = std::function<Status(const std::string&)>;

// Which of the model's MLA and KDA layers (indices among layers of that kind) a span holds.
struct CacheLayers {
  int64_t mla0 = 0, mla1 = 0, kda0 = 0, kda1 = 0;
};

CacheLayers cache_layers(const ModelConfig& c, int64_t begin, int64_t end) {
  CacheLayers l;
  for (int64_t i = 0; i < end; ++i) {
    const bool mla = c.layer_kinds[static_cast<size_t>(i)] == LayerKind::kMla;
    if (i < begin) ++(mla ? l.mla0 : l.kda0);
    ++(mla ? l.mla1 : l.kda1);
  }
  return l;
}

CacheLayers all_layers(MlaKvPool& kv, KdaStatePool& st) { return CacheLayers{0, kv.num_layers(), 0, st.num_layers()}; }

// One rank's share of `region` as kCache frames: one per page (its MLA layers in `layers`, so
// a frame stays far below the 64 MiB limit) and one per KDA layer of the slot in `layers`.
// Returns the count.
Result<uint32_t> send_rank_cache(int rank, MlaKvPool& kv, KdaStatePool& st, const CacheRegion& region, const CacheLayers& layers,
                                 const Send& send) {
  uint32_t frames = 0;
  node::CacheData m;
  m.rank = static_cast<uint32_t>(rank);
  if (layers.mla1 > layers.mla0) {
    m.kind = node::CacheData::kPage;
    m.dtype = kv.dtype();
    m.layer = static_cast<uint32_t>(layers.mla0);
    for (int32_t page : region.pages) {
      if (page < 0 || page >= kv.num_pages()) return internal_error("node cache: page " + std::to_string(page) + " is not in the pool");
      m.id = page;
      m.data.clear();
      // The pool's bytes as they are (2 an element in a bf16 pool).
      for (int64_t l = layers.mla0; l < layers.mla1; ++l) {
        const uint8_t* src = kv.page_ptr(l, page);
        m.data.insert(m.data.end(), src, src + kv.page_bytes());
      }
      PDS_RETURN_IF_ERROR(send(node::encode(m)));
      ++frames;
    }
  }
  if (region.slot >= 0 && layers.kda1 > layers.kda0) {
    if (region.slot >= st.num_slots()) return internal_error("node cache: slot " + std::to_string(region.slot) + " is not in the pool");
    m.kind = node::CacheData::kStateLayer;
    m.dtype = DType::kF32;
    m.id = region.slot;
    for (int64_t l = layers.kda0; l < layers.kda1; ++l) {
      const auto* src = reinterpret_cast<const uint8_t*>(st.conv(region.slot, l));
      m.layer = static_cast<uint32_t>(l);
      m.data.assign(src, src + st.layer_floats() * sizeof(float));
      PDS_RETURN_IF_ERROR(send(node::encode(m)));
      ++frames;
    }
  }
  return frames;
}

// One kCache frame into a rank's pools, checked against their geometry and, for a node's
// pipeline stages, against the layers it holds (`allowed`).
Status write_cache(MlaKvPool& kv, KdaStatePool& st, const node::CacheData& m, const CacheLayers& allowed) {
  if (m.kind == node::CacheData::kPage) {
    // Never reinterpreted: a float32 frame into a bfloat16 pool (or back) is refused by name.
    if (m.dtype != kv.dtype())
      return Status(ErrorCode::kDataLoss, "node cache: page " + std::to_string(m.id) + " arrived as " + kv_cache_dtype_name(m.dtype) +
                                              ", this rank's MLA pool holds " + kv_cache_dtype_name(kv.dtype()) +
                                              " (every node of an instance runs the leader's --kv-cache-dtype)");
    const int64_t pb = kv.page_bytes(), layers = pb > 0 ? static_cast<int64_t>(m.data.size()) / pb : 0;
    if (m.id >= kv.num_pages() || layers < 1 || layers * pb != static_cast<int64_t>(m.data.size()) || m.layer < allowed.mla0 ||
        m.layer + layers > allowed.mla1)
      return internal_error("node cache: page " + std::to_string(m.id) + " of " + std::to_string(m.data.size()) + " bytes from MLA layer " +
                            std::to_string(m.layer) + " does not fit the pool");
    for (int64_t l = 0; l < layers; ++l) std::memcpy(kv.page_ptr(m.layer + l, m.id), m.data.data() + l * pb, static_cast<size_t>(pb));
    return Status::ok();
  }
  if (m.dtype != DType::kF32 || m.id >= st.num_slots() || m.layer < allowed.kda0 || m.layer >= allowed.kda1 || m.layer >= st.num_layers() ||
      static_cast<int64_t>(m.data.size()) != st.layer_floats() * static_cast<int64_t>(sizeof(float)))
    return internal_error("node cache: slot " + std::to_string(m.id) + " layer " + std::to_string(m.layer) + " does not fit the pool");
  std::memcpy(st.conv(m.id, m.layer), m.data.data(), m.data.size());
  return Status::ok();
}

const uint8_t* bytes(const node::Frame& f) { return reinterpret_cast<const uint8_t*>(f.payload.data()); }

// Clears the leader's expect_replies on every way out of fetch_region.
struct ExpectingReplies {
  node::LeaderLink& link;
  explicit ExpectingReplies(node::LeaderLink& l) : link(l) { link.expect_replies(true); }
  ~ExpectingReplies() { link.expect_replies(false); }
};

}  // namespace

Status forward_region(node::LeaderLink& link, TpModelGroup& g, int local, const CacheRegion& region) {
  for (int r = local; r < g.transfer_ranks(); ++r) {
    const int to = r / local;
    auto sent = send_rank_cache(r, g.transfer_kv(r), g.transfer_state(r), region, all_layers(g.transfer_kv(r), g.transfer_state(r)),
                                [&](const std::string& f) { return link.send_to(to, f); });
    PDS_RETURN_IF_ERROR(sent.status());
  }
  return Status::ok();
}

namespace {

// Reads node n's reply to a kFetch (kCache frames, then kFetchDone with their count) into the
// pools `rank_pools` names, each frame checked against the layers `allowed` says node n holds.
Status read_fetch_reply(node::LeaderLink& link, int n, int nnodes, std::chrono::milliseconds timeout,
                        const std::function<Status(const node::CacheData&)>& write) {
  const std::string who = "node " + std::to_string(n) + " of " + std::to_string(nnodes);
  uint32_t frames = 0;
  while (true) {
    PDS_ASSIGN_OR_RETURN(node::Frame f, link.receive_from(n, timeout));
    if (f.type == node::MsgType::kFetchDone) {
      PDS_ASSIGN_OR_RETURN(node::FetchDone done, node::decode_fetch_done(bytes(f), f.payload.size()));
      if (done.frames != frames)
        return Status(ErrorCode::kDataLoss, who + " sent " + std::to_string(frames) + " cache frames and counted " + std::to_string(done.frames));
      return Status::ok();
    }
    if (f.type != node::MsgType::kCache) return Status(ErrorCode::kDataLoss, who + " answered a fetch with frame type " + std::to_string(static_cast<int>(f.type)));
    PDS_ASSIGN_OR_RETURN(node::CacheData m, node::decode_cache(bytes(f), f.payload.size()));
    if (Status st = write(m); !st.is_ok()) return Status(st.code(), who + ": " + st.message());
    ++frames;
  }
}

}  // namespace

Status fetch_region(node::LeaderLink& link, TpModelGroup& g, int local, const CacheRegion& region, std::chrono::milliseconds timeout) {
  const int nnodes = g.transfer_ranks() / local;
  ExpectingReplies expecting(link);
  // Every follower first, so they download and send at once; then their replies in turn.
  const std::string ask = node::encode(node::Fetch{region.pages, region.slot});
  for (int n = 1; n < nnodes; ++n) PDS_RETURN_IF_ERROR(link.send_to(n, ask));
  for (int n = 1; n < nnodes; ++n)
    PDS_RETURN_IF_ERROR(read_fetch_reply(link, n, nnodes, timeout, [&](const node::CacheData& m) {
      const int r = static_cast<int>(m.rank);
      if (r / local != n || r >= g.transfer_ranks()) return Status(ErrorCode::kDataLoss, "sent the cache of rank " + std::to_string(r));
      return write_cache(g.transfer_kv(r), g.transfer_state(r), m, all_layers(g.transfer_kv(r), g.transfer_state(r)));
    }));
  return Status::ok();
}

Status fetch_stage_region(node::LeaderLink& link, TpModelGroup& g, int nnodes, const CacheRegion& region, std::chrono::milliseconds timeout) {
  const ModelConfig& c = g.config();
  PDS_ASSIGN_OR_RETURN(std::vector<LayerSpan> stages, plan_pipeline_stages(c, g.total_stages()));
  const int per_node = g.total_stages() / nnodes;
  ExpectingReplies expecting(link);
  const std::string ask = node::encode(node::Fetch{region.pages, region.slot});
  for (int n = 1; n < nnodes; ++n) PDS_RETURN_IF_ERROR(link.send_to(n, ask));
  for (int n = 1; n < nnodes; ++n) {
    const CacheLayers held = cache_layers(c, stages[n * per_node].begin, stages[(n + 1) * per_node - 1].end);
    PDS_RETURN_IF_ERROR(read_fetch_reply(link, n, nnodes, timeout, [&](const node::CacheData& m) {
      if (m.rank >= static_cast<uint32_t>(g.size())) return Status(ErrorCode::kDataLoss, "sent the cache of TP rank " + std::to_string(m.rank));
      return write_cache(g.kv(static_cast<int>(m.rank)), g.state(static_cast<int>(m.rank)), m, held);
    }));
  }
  return Status::ok();
}

Status apply_cache(TpModelGroup& g, int first, const node::CacheData& m, CacheRegion* pending) {
  const int i = static_cast<int>(m.rank) - first;
  if (i < 0 || i >= g.size())
    return internal_error("node cache: rank " + std::to_string(m.rank) + ", this node runs ranks " + std::to_string(first) + ".." +
                          std::to_string(first + g.size() - 1));
  PDS_RETURN_IF_ERROR(write_cache(g.kv(i), g.state(i), m, all_layers(g.kv(i), g.state(i))));
  if (m.kind == node::CacheData::kStateLayer) {
    pending->slot = m.id;
  } else if (std::find(pending->pages.begin(), pending->pages.end(), m.id) == pending->pages.end()) {
    pending->pages.push_back(m.id);
  }
  return Status::ok();
}

namespace {

// A follower's answer to a kFetch: its pools -> host (device, stages), then every local rank's
// share as kCache frames (rank first + i; the layers `held`, or all of them) and kFetchDone.
Status answer_with(node::FollowerLink& link, TpModelGroup& g, int first, const node::Fetch& f, const CacheLayers* held) {
  const CacheRegion region{f.pages, f.slot};
  PDS_RETURN_IF_ERROR(g.cache_to_host(region));
  uint32_t frames = 0;
  for (int i = 0; i < g.size(); ++i) {
    PDS_ASSIGN_OR_RETURN(uint32_t n, send_rank_cache(first + i, g.kv(i), g.state(i), region, held ? *held : all_layers(g.kv(i), g.state(i)),
                                                     [&](const std::string& fr) { return link.send(fr); }));
    frames += n;
  }
  return link.send(node::encode(node::FetchDone{frames}));
}

}  // namespace

Status answer_fetch(node::FollowerLink& link, TpModelGroup& g, int first, const node::Fetch& f) {
  return answer_with(link, g, first, f, nullptr);
}

Status answer_stage_fetch(node::FollowerLink& link, TpModelGroup& g, const node::Fetch& f) {
  // Stages whole on a node: its TP ranks are 0..tp-1, holding this node's stages' layers.
  const CacheLayers held = cache_layers(g.config(), g.stage_model(0, 0).layers().begin, g.stage_model(g.pp() - 1, 0).layers().end);
  return answer_with(link, g, 0, f, &held);
}

}  // namespace pdserve::server
