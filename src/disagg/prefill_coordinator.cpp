// Prefill's room lifecycle. Rooms are keyed by the bootstrap room id; a room exists from the
// first of (decode's target, the HTTP request, decode's abort) until the request releases it
// or, unclaimed, until the bootstrap timeout.
#include "pdserve/disagg/prefill_coordinator.h"

#include <algorithm>
#include <thread>

#include <spdlog/spdlog.h>

#include "pdserve/disagg/selftest.h"
#include "pdserve/disagg/bootstrap_auth.h"
#include "pdserve/disagg/transfer_plan.h"
#include "pdserve/net/http_listener.h"

namespace pdserve::disagg {

using Clock = std::chrono::steady_clock;

struct PrefillCoordinator::Room {
  uint64_t room = 0;
  std::optional<RoomTarget> target;
  Clock::time_point created = Clock::now();
  bool claimed = false;   // an HTTP request owns the room
  bool aborted = false;   // decode gave up (or the room failed here)
  Status why;
  uint64_t request_id = 0;
  bool has_peer = false;
  transfer::PeerId peer = 0;
  int64_t pages_sent = 0;
  std::vector<std::shared_ptr<transfer::TransferBatch>> batches;
  bool final_submitted = false;
  bool done = false;         // kv_sent was posted
  bool metrics_open = false;
  uint64_t bytes = 0;
  uint64_t runs = 0;         // write operations submitted
  uint64_t checksum = 0;     // wrapping sum of unit hashes sent so far
  Clock::time_point first_send;
  Clock::time_point acked_at;  // every batch acknowledged (done and ok)
  bool acked = false;
};

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string peer_key(const std::optional<RoomTarget>& t) {
  return t ? t->transfer_host + ":" + std::to_string(t->transfer_port) : std::string();
}

void reply(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}
}  // namespace

Result<std::unique_ptr<PrefillCoordinator>> PrefillCoordinator::create(const DisaggConfig& cfg, runtime::Engine& engine,
                                                                       std::unique_ptr<transfer::Transport> transport,
                                                                       const std::string& model_dir) {
  PDS_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<PrefillCoordinator> c(new PrefillCoordinator());
  c->cfg_ = cfg;
  c->engine_ = &engine;
  c->transport_ = std::move(transport);
  TpModelGroup& g = engine.group();
  PDS_ASSIGN_OR_RETURN(std::string fp, model_fingerprint(model_dir));
  c->layout_ = describe_layout("prefill", g.config(), fp, g.transfer_ranks(), g.kv(0), g.state(0), cfg.checksum);
  c->layout_.transfer = transfer_info_of(c->transport_->capabilities());
  c->aux_.resize(static_cast<size_t>(g.state(0).num_slots()));
  PDS_RETURN_IF_ERROR(c->transport_->register_region({kAuxRegion, c->aux_.data(), c->aux_.size() * sizeof(AuxRow), "aux", false}));
  c->bases_[kAuxRegion] = reinterpret_cast<const uint8_t*>(c->aux_.data());
  // Each rank registers its pools (across nodes: the other nodes' ranks through node 0's
  // staging pools, node_cache.h); /route answers once all have.
  for (int r = 0; r < g.transfer_ranks(); ++r) {
    PDS_RETURN_IF_ERROR(register_rank_pools(*c->transport_, r, g.transfer_kv(r), g.transfer_state(r), c->bases_));
    c->registered_ranks_.fetch_add(1);
  }
  runtime::DisaggHooks hooks;
  PrefillCoordinator* self = c.get();
  hooks.on_chunk_done = [self](uint64_t id, uint64_t room, const runtime::Sequence& s) { self->on_chunk_done(id, room, s); };
  hooks.on_prefill_done = [self](uint64_t id, uint64_t room, const runtime::Sequence& s, const runtime::FirstToken& f) {
    self->on_prefill_done(id, room, s, f);
  };
  hooks.on_release = [self](uint64_t id, uint64_t room, const runtime::Sequence& s) { self->on_release(id, room, s); };
  engine.set_disagg_hooks(std::move(hooks));

  c->http_ = std::make_unique<net::HttpListener>();
  c->install_routes();
  const int port = cfg.bootstrap_port == 0 ? c->http_->bind_to_any_port(cfg.bootstrap_host)
                                           : (c->http_->bind_to_port(cfg.bootstrap_host, cfg.bootstrap_port) ? cfg.bootstrap_port : -1);
  if (port <= 0)
    return io_error("bootstrap server: cannot bind " + cfg.bootstrap_host + ":" + std::to_string(cfg.bootstrap_port));
  c->http_->raise_backlog();
  c->bootstrap_port_ = port;
  c->http_thread_ = std::thread([self] { self->http_->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs: wait for it (see HttpServer::run).
  for (int i = 0; i < 1000 && !c->http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  c->watcher_ = std::thread([self] { self->watch(); });
  return c;
}

PrefillCoordinator::~PrefillCoordinator() { stop(); }

void PrefillCoordinator::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
  if (watcher_.joinable()) watcher_.join();
}

void PrefillCoordinator::install_routes() {
  httplib::Server& h = *http_;
  // With a cluster secret every route but /health needs decode's signature (the body is only
  // read by the time a route runs, so each calls this first).
  auto auth = std::make_shared<BootstrapAuth>(cfg_.cluster_secret);
  auto refused = [auth](const httplib::Request& req, httplib::Response& res) {
    Status st = auth->verify(req.method, req.path, req.body, req.get_header_value(kAuthTimestampHeader),
                             req.get_header_value(kAuthNonceHeader), req.get_header_value(kAuthSignatureHeader));
    if (st.is_ok()) return false;
    spdlog::warn("bootstrap: refused {} {} from {}: {}", req.method, req.path, req.remote_addr, st.message());
    reply(res, 401, Json{{"error", st.message()}});
    return true;
  };
  h.new_task_queue = [] { return new httplib::ThreadPool(8); };
  h.set_payload_max_length(16 << 20);
  h.Get("/route", [this, refused](const httplib::Request& req, httplib::Response& res) {
    if (refused(req, res)) return;
    const int have = registered_ranks_.load();
    if (have < layout_.tp)
      return reply(res, 503, Json{{"error", "prefill ranks registered: " + std::to_string(have) + " of " + std::to_string(layout_.tp)}});
    reply(res, 200, layout_.to_json());
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, Json{{"status", "ok"}, {"instance_id", layout_.instance_id}});
  });
  h.Post("/target", [this, refused](const httplib::Request& req, httplib::Response& res) {
    if (refused(req, res)) return;
    auto j = parse_json(req.body, "target");
    if (!j.is_ok()) return reply(res, 400, Json{{"error", j.status().message()}});
    auto t = RoomTarget::from_json(*j);
    if (!t.is_ok()) return reply(res, 400, Json{{"error", t.status().message()}});
    if (Status st = check_pair(layout_, t->decode); !st.is_ok()) return reply(res, 400, Json{{"error", st.message()}});
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = rooms_[t->room];
    if (!slot) {
      slot = std::make_unique<Room>();
      slot->room = t->room;
    }
    if (slot->target) return reply(res, 409, Json{{"error", "room " + std::to_string(t->room) + " already has a target"}});
    slot->target = std::move(t).value();
    cv_.notify_all();
    reply(res, 200, Json{{"ok", true}});
  });
  h.Post("/selftest", [this, refused](const httplib::Request& req, httplib::Response& res) {
    if (refused(req, res)) return;
    auto j = parse_json(req.body, "selftest");
    if (!j.is_ok()) return reply(res, 400, Json{{"error", j.status().message()}});
    Status st = run_selftest(*j);
    if (st.code() == ErrorCode::kInvalidArgument) return reply(res, 400, Json{{"error", st.message()}});
    if (!st.is_ok()) return reply(res, 502, Json{{"error", st.message()}});
    reply(res, 200, Json{{"ok", true}});
  });
  h.Post("/abort", [this, refused](const httplib::Request& req, httplib::Response& res) {
    if (refused(req, res)) return;
    auto j = parse_json(req.body, "abort");
    if (!j.is_ok() || !j->is_object() || !j->contains("room") || !j->at("room").is_number_unsigned())
      return reply(res, 400, Json{{"error", "abort: body must be {\"room\": N, \"reason\": \"...\"}"}});
    const uint64_t room = j->at("room").get<uint64_t>();
    const std::string reason = j->value("reason", std::string("no reason given"));
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = rooms_[room];
    if (!slot) {  // a tombstone: the request may still arrive, and must fail at once
      slot = std::make_unique<Room>();
      slot->room = room;
    }
    fail_room(room, Status(ErrorCode::kAborted, "decode aborted room " + std::to_string(room) + ": " + reason));
    reply(res, 200, Json{{"ok", true}});
  });
}

// mu_ held. Marks the room failed; a request running it is told through the engine.
void PrefillCoordinator::fail_room(uint64_t room, const Status& why) {
  auto it = rooms_.find(room);
  if (it == rooms_.end() || it->second->aborted) return;
  Room& r = *it->second;
  r.aborted = true;
  r.why = why;
  if (r.request_id != 0 && !r.done) {
    r.done = true;
    engine_->fail(r.request_id, why);
  }
  cv_.notify_all();
}

Status PrefillCoordinator::await_target(uint64_t room, const std::vector<int32_t>& prompt,
                                        const std::function<bool()>& caller_gone) {
  std::unique_lock<std::mutex> lock(mu_);
  auto& slot = rooms_[room];
  if (!slot) {
    slot = std::make_unique<Room>();
    slot->room = room;
  }
  Room& r = *slot;
  if (r.claimed) return invalid_argument("bootstrap_room: room " + std::to_string(room) + " is already in use on this prefill server");
  r.claimed = true;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.bootstrap_timeout_s));
  auto ready = [&] { return r.target.has_value() || r.aborted || stopping_; };
  bool gone = false;
  while (!ready() && Clock::now() < deadline) {
    cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)), ready);
    if (ready() || !caller_gone) continue;
    // The router closes its call when decode refused the room; decode posts no abort to an
    // address outside its --allow-prefill list, so this is how prefill hears of it.
    lock.unlock();
    gone = caller_gone();
    lock.lock();
    if (gone) break;
  }
  Status st;
  if (r.aborted) st = r.why;
  else if (stopping_) st = Status(ErrorCode::kUnavailable, "prefill server is shutting down");
  else if (gone && !r.target)
    st = Status(ErrorCode::kAborted, "the caller hung up while prefill waited for decode to claim room " + std::to_string(room));
  else if (!r.target)
    st = Status(ErrorCode::kDeadlineExceeded, "prefill waited " + std::to_string(cfg_.bootstrap_timeout_s) +
                                                  " s for decode to claim room " + std::to_string(room) +
                                                  "; is the decode server reachable and sent the same request?");
  else if (r.target->prompt_len != static_cast<int64_t>(prompt.size()) || r.target->prompt_hash != hash_tokens(prompt))
    st = invalid_argument("bootstrap_room: decode holds a different prompt for room " + std::to_string(room) +
                          " (the router sent different bodies to the pair)");
  if (!st.is_ok()) {
    rooms_.erase(room);
    return st;
  }
  r.metrics_open = true;
  metrics_.room_started();
  return Status::ok();
}

void PrefillCoordinator::drop(uint64_t room, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return;
  Room& r = *it->second;
  // Decode reserved pages for this room: tell it now rather than let it time out.
  if (r.target && !r.aborted) {
    if (!r.has_peer) {
      auto peer = transport_->open_peer({r.target->transfer_host, static_cast<uint16_t>(r.target->transfer_port)});
      if (peer.is_ok()) {
        r.peer = *peer;
        r.has_peer = true;
      }
    }
    if (r.has_peer) send_failure_notice(r, "fail:" + why.message());
  }
  if (r.metrics_open) record(r, false, why.message());
  rooms_.erase(it);
}

// mu_ held. Best effort: the room is being dropped either way. When the notice cannot go as a
// batch (the peer's batch credits or notification slots are used up, often the very reason
// the room failed), the transport reports the failure out of band where it can (RDMA).
void PrefillCoordinator::send_failure_notice(Room& r, std::string notice) {
  auto sent = transport_->submit(r.peer, {r.room, r.target->generation, {}, std::move(notice)});
  if (sent.is_ok()) return;
  Status st = transport_->report_room_failure(r.peer, r.room, r.target->generation);
  if (!st.is_ok())
    spdlog::warn("room {}: decode was not told the room failed ({}; then {}); it frees the room at its timeout", r.room,
                 sent.status().message(), st.message());
}

// mu_ held.
Status PrefillCoordinator::send(Room& r, uint64_t id, std::vector<transfer::WriteOp> writes, std::optional<std::string> notify) {
  (void)id;
  if (!r.has_peer) {
    PDS_ASSIGN_OR_RETURN(r.peer, transport_->open_peer({r.target->transfer_host, static_cast<uint16_t>(r.target->transfer_port)}));
    r.has_peer = true;
    r.first_send = Clock::now();
  }
  transfer::BatchRequest b{r.room, r.target->generation, std::move(writes), std::move(notify)};
  for (const auto& w : b.writes) r.bytes += w.length;
  r.runs += b.writes.size();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.release_wait_s));
  for (;;) {
    auto batch = transport_->submit(r.peer, b);
    if (batch.is_ok()) {
      r.batches.push_back(std::move(batch).value());
      return Status::ok();
    }
    // Too many batches in flight to that peer: give them a moment, within a bound.
    if (batch.status().code() != ErrorCode::kResourceExhausted || Clock::now() > deadline) return batch.status();
    mu_.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    mu_.lock();
  }
}

void PrefillCoordinator::on_chunk_done(uint64_t id, uint64_t room, const runtime::Sequence& seq) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || !it->second->target) {
    engine_->fail(id, internal_error("prefill: room " + std::to_string(room) + " has no target"));
    return;
  }
  Room& r = *it->second;
  r.request_id = id;
  if (r.aborted) {
    if (!r.done) engine_->fail(id, r.why);
    r.done = true;
    return;
  }
  const int64_t full = seq.cached_len / layout_.page_size;
  if (full <= r.pages_sent) return;
  if (cfg_.checksum) r.checksum += hash_units(page_units(layout_, r.target->decode, seq.pages, r.target->pages, r.pages_sent, full));
  Status st = send(r, id, page_writes(layout_, r.target->decode, seq.pages, r.target->pages, r.pages_sent, full), std::nullopt);
  if (!st.is_ok()) return fail_room(room, Status(ErrorCode::kUnavailable, "KV transfer to decode failed: " + st.message()));
  r.pages_sent = full;
}

void PrefillCoordinator::on_prefill_done(uint64_t id, uint64_t room, const runtime::Sequence& seq,
                                         const runtime::FirstToken& first) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || !it->second->target) {
    engine_->kv_sent(id, internal_error("prefill: room " + std::to_string(room) + " has no target"));
    return;
  }
  Room& r = *it->second;
  r.request_id = id;
  if (r.aborted) {
    if (!r.done) engine_->kv_sent(id, r.why);
    r.done = true;
    return;
  }
  const int64_t n = static_cast<int64_t>(r.target->pages.size());
  std::vector<transfer::WriteOp> writes = page_writes(layout_, r.target->decode, seq.pages, r.target->pages, r.pages_sent, n);
  auto state = state_writes(layout_, r.target->decode, seq.slot, r.target->slot);
  if (!state.is_ok()) return fail_room(room, state.status());
  writes.insert(writes.end(), state->begin(), state->end());
  aux_[static_cast<size_t>(seq.slot)] = make_aux_row(room, r.target->generation, seq.prompt_len, first);
  writes.push_back(aux_write(seq.slot, r.target->aux_row));
  std::string notice = "ok";
  if (cfg_.checksum) {
    r.checksum += hash_units(page_units(layout_, r.target->decode, seq.pages, r.target->pages, r.pages_sent, n));
    r.checksum += hash_units(*state);
    r.checksum += hash_units({aux_write(seq.slot, r.target->aux_row)});
    notice += " " + std::to_string(r.checksum);
  }
  // Decode records the room's runs from this count (it cannot see how chunks were merged).
  notice += " runs=" + std::to_string(r.runs + writes.size());
  Status st = send(r, id, std::move(writes), notice);
  if (!st.is_ok()) return fail_room(room, Status(ErrorCode::kUnavailable, "KV transfer to decode failed: " + st.message()));
  r.pages_sent = n;
  r.final_submitted = true;
  cv_.notify_all();
}

// mu_ held. Prefill's time for a room: first write to the acknowledgement of the last.
void PrefillCoordinator::record(const Room& r, bool ok, const std::string& error) {
  RoomRecord rec;
  rec.room = r.room;
  rec.request_id = r.request_id;
  rec.peer = peer_key(r.target);
  rec.ok = ok;
  rec.bytes = r.bytes;
  rec.runs = r.runs;
  rec.batches = r.batches.size();
  if (r.has_peer) rec.seconds = std::chrono::duration<double>((r.acked ? r.acked_at : Clock::now()) - r.first_send).count();
  rec.error = error;
  metrics_.room_ended(rec);
}

void PrefillCoordinator::on_release(uint64_t id, uint64_t room, const runtime::Sequence&) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || (it->second->request_id != 0 && it->second->request_id != id)) return;
  Room& r = *it->second;
  // The pages and slot are about to be reused: no send may still be reading them.
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.release_wait_s));
  auto in_flight = [&] {
    for (auto& b : r.batches)
      if (!b->poll()) return true;
    return false;
  };
  while (in_flight() && Clock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
  }
  if (in_flight()) {
    spdlog::warn("room {}: sends still in flight after {} s; closing the peer session", room, cfg_.release_wait_s);
    (void)transport_->close_peer(r.peer);
  }
  bool ok = r.done && !r.aborted;
  for (auto& b : r.batches) ok = ok && b->poll() && b->poll()->is_ok();
  if (!ok && r.target && r.has_peer && !r.aborted)
    send_failure_notice(r, "fail:prefill dropped the request");
  if (r.metrics_open) record(r, ok, ok ? std::string() : (r.aborted ? r.why.message() : "transfer did not complete"));
  rooms_.erase(it);
}

Status PrefillCoordinator::run_selftest(const Json& body) {
  PDS_ASSIGN_OR_RETURN(SelfTestRequest t, SelfTestRequest::from_json(body));
  std::lock_guard<std::mutex> lock(selftest_mu_);
  std::vector<uint8_t> buf(t.length);
  fill_pattern(buf.data(), t.length, t.nonce);
  const transfer::RegionId local = kSelfTestRegion;
  PDS_RETURN_IF_ERROR(transport_->register_region({local, buf.data(), t.length, "selftest", false}));
  const std::string where = "self-test write to decode " + t.transfer_host + ":" + std::to_string(t.transfer_port);
  Status st;
  auto peer = transport_->open_peer({t.transfer_host, static_cast<uint16_t>(t.transfer_port)});
  if (!peer.is_ok()) {
    st = Status(ErrorCode::kUnavailable, where + ": " + peer.status().message());
  } else {
    auto batch = transport_->submit(*peer, {t.room, t.generation, {{local, 0, kSelfTestRegion, 0, t.length}}, std::nullopt});
    if (!batch.is_ok()) {
      st = Status(ErrorCode::kUnavailable, where + ": " + batch.status().message());
    } else {
      st = (*batch)->wait(Clock::now() + std::chrono::seconds(10));
      // Still in flight: abandon it, so no byte of `buf` is read after it is freed.
      if (st.code() == ErrorCode::kDeadlineExceeded) (void)transport_->close_peer(*peer);
      if (!st.is_ok()) st = Status(ErrorCode::kUnavailable, where + ": " + st.message());
    }
  }
  (void)transport_->unregister_region(local);
  return st;
}

uint64_t PrefillCoordinator::hash_units(const std::vector<transfer::WriteOp>& units) const {
  uint64_t sum = 0;
  for (const auto& u : units) sum += unit_hash(u, bases_.at(u.local_region) + u.local_offset);
  return sum;
}

// Posts kv_sent once every batch of a finished room ended; expires unclaimed rooms.
void PrefillCoordinator::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  bool sending = false;
  while (!stopping_) {
    // Poll fast only while a room's last batch is in flight.
    cv_.wait_for(lock, std::chrono::milliseconds(sending ? 1 : 100));
    sending = false;
    for (auto it = rooms_.begin(); it != rooms_.end();) {
      Room& r = *it->second;
      if (r.final_submitted && !r.done) {
        sending = true;
        std::optional<Status> failed;
        bool all = true;
        for (auto& b : r.batches) {
          auto p = b->poll();
          if (!p) all = false;
          else if (!p->is_ok() && !failed) failed = *p;
        }
        if (failed) {
          r.done = true;
          engine_->kv_sent(r.request_id, Status(ErrorCode::kUnavailable, "KV transfer to decode failed: " + failed->message()));
        } else if (all) {
          r.done = true;
          r.acked = true;
          r.acked_at = Clock::now();
          engine_->kv_sent(r.request_id, Status::ok());
        }
      }
      if (!r.claimed && seconds_since(r.created) > cfg_.bootstrap_timeout_s) {
        it = rooms_.erase(it);  // a target (or abort) no request ever came for
        continue;
      }
      ++it;
    }
  }
}

Json PrefillCoordinator::info() const {
  const transfer::MetricsSnapshot tm = transport_->metrics();
  std::lock_guard<std::mutex> lock(mu_);
  return Json{{"role", "prefill"},
              {"bootstrap_port", bootstrap_port_},
              {"layout", layout_.to_json()},
              {"transport", transport_->capabilities().name},
              {"rooms", rooms_.size()},
              {"transfer", metrics_.snapshot().to_json()},
              {"transport_counters", {{"bytes_sent", tm.bytes_sent},
                                      {"batches_ok", tm.batches_ok},
                                      {"batches_failed", tm.batches_failed}}},
              {"config", cfg_.to_json()}};
}

}  // namespace pdserve::disagg
