// Decode's room lifecycle: prepare (layout checked) -> reserved (grants, target sent) ->
// landed (aux row checked, revoke, kv_ready) or failed (timeout, heartbeat, transfer error,
// prefill's "fail:" notice) -> released (revoke, and /abort to prefill unless it landed).
#include "pdserve/disagg/decode_coordinator.h"

#include <httplib.h>

#include <cctype>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "pdserve/disagg/selftest.h"
#include "pdserve/disagg/bootstrap_auth.h"
#include "pdserve/disagg/transfer_plan.h"

namespace pdserve::disagg {

using Clock = std::chrono::steady_clock;

struct DecodeCoordinator::Prefill {
  std::string host;
  int port = 0;
  KvLayout layout;
  bool has_layout = false;
  int misses = 0;
  bool configured = false;      // named in prefill_peers: must pass the self-test
  bool selftest_passed = false;
  uint64_t rooms_ok = 0, rooms_failed = 0, bytes = 0;  // per peer, rooms that reached it
  std::string selftest_error = "not run yet";
  std::string key() const { return host + ":" + std::to_string(port); }
};

struct DecodeCoordinator::Room {
  uint64_t room = 0;
  std::shared_ptr<Prefill> prefill;
  int64_t prompt_len = 0;
  uint64_t prompt_hash = 0;
  uint64_t request_id = 0;
  bool reserved = false;
  uint32_t generation = 0;
  int32_t slot = -1;
  int64_t prompt_pages = 0;
  std::vector<int32_t> pages;  // the prompt's pages (granted to the room)
  Clock::time_point reserved_at;
  bool finished = false;   // kv_ready or fail was posted to the engine
  bool landed = false;     // the KV arrived and checked out
  std::string why;         // the failure posted to the engine
};

namespace {
Clock::duration secs(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// The write operations prefill says carried the room ("ok [checksum] runs=N"); 0 if absent.
uint64_t notice_runs(const std::string& payload) {
  const size_t at = payload.rfind(" runs=");
  return at == std::string::npos ? 0 : std::strtoull(payload.c_str() + at + 6, nullptr, 10);
}

// One short-lived client per call: httplib clients are not shared across threads.
// `secret`: the cluster secret; non-empty signs the request (bootstrap_auth.h).
Result<Json> http_call(const std::string& host, int port, const std::string& method, const std::string& path,
                       const Json* body, double timeout_s, const std::string& secret) {
  httplib::Client cli(host, port);
  const std::string payload = method == "GET" ? "" : (body ? body->dump() : "{}");
  httplib::Headers headers;
  for (auto& [k, v] : BootstrapAuth(secret).sign(method, path, payload)) headers.emplace(k, v);
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_s));
  cli.set_connection_timeout(t);
  cli.set_read_timeout(t);
  cli.set_write_timeout(t);
  auto res = method == "GET" ? cli.Get(path, headers) : cli.Post(path, headers, payload, "application/json");
  const std::string where = "prefill bootstrap server " + host + ":" + std::to_string(port) + path;
  if (!res) return Status(ErrorCode::kUnavailable, where + ": " + httplib::to_string(res.error()));
  auto j = parse_json(res->body, where);
  if (res->status != 200) {
    std::string msg = j.is_ok() && j->is_object() && j->contains("error") ? j->at("error").dump() : res->body;
    return Status(res->status == 400 ? ErrorCode::kInvalidArgument : ErrorCode::kUnavailable,
                  where + " answered " + std::to_string(res->status) + ": " + msg);
  }
  return j;
}
}  // namespace

Result<std::unique_ptr<DecodeCoordinator>> DecodeCoordinator::create(const DisaggConfig& cfg, runtime::Engine& engine,
                                                                     std::unique_ptr<transfer::Transport> transport,
                                                                     const std::string& model_dir) {
  PDS_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<DecodeCoordinator> c(new DecodeCoordinator());
  c->cfg_ = cfg;
  c->engine_ = &engine;
  c->transport_ = std::move(transport);
  TpModelGroup& g = engine.group();
  PDS_ASSIGN_OR_RETURN(std::string fp, model_fingerprint(model_dir));
  c->layout_ = describe_layout("decode", g.config(), fp, g.transfer_ranks(), g.kv(0), g.state(0), cfg.checksum);
  c->layout_.transfer = transfer_info_of(c->transport_->capabilities());
  c->aux_.resize(static_cast<size_t>(g.state(0).num_slots()));
  PDS_RETURN_IF_ERROR(c->transport_->register_region({kAuxRegion, c->aux_.data(), c->aux_.size() * sizeof(AuxRow), "aux", false}));
  c->bases_[kAuxRegion] = reinterpret_cast<const uint8_t*>(c->aux_.data());
  for (int r = 0; r < g.transfer_ranks(); ++r)
    PDS_RETURN_IF_ERROR(register_rank_pools(*c->transport_, r, g.transfer_kv(r), g.transfer_state(r), c->bases_));
  DecodeCoordinator* self = c.get();
  transfer::ReceiverCallbacks cb;
  cb.on_notify = [self](transfer::RoomId room, const std::string& payload) {
    self->post([self, room, payload] { self->on_notify(room, payload); });
  };
  cb.on_room_failed = [self](transfer::RoomId room, const Status& why) {
    self->post([self, room, why] { self->on_room_failed(room, why); });
  };
  c->transport_->set_callbacks(std::move(cb));
  runtime::DisaggHooks hooks;
  hooks.on_kv_reserved = [self](uint64_t id, uint64_t room, const runtime::Sequence& s) { self->on_kv_reserved(id, room, s); };
  hooks.on_release = [self](uint64_t id, uint64_t room, const runtime::Sequence& s) { self->on_release(id, room, s); };
  engine.set_disagg_hooks(std::move(hooks));
  // The self-test scratch: a page and a state slot's worth of bytes.
  c->scratch_.resize(static_cast<size_t>(std::max<int64_t>(4096, c->layout_.page_bytes() + c->layout_.slot_floats_per_rank() * 4)));
  PDS_RETURN_IF_ERROR(c->transport_->register_region({kSelfTestRegion, c->scratch_.data(), c->scratch_.size(), "selftest", false}));
  for (const std::string& peer : cfg.prefill_peers) {
    auto p = std::make_shared<Prefill>();
    const size_t colon = peer.rfind(':');
    p->host = peer.substr(0, colon);
    p->port = std::stoi(peer.substr(colon + 1));
    p->configured = true;
    c->prefills_[p->key()] = p;
  }
  c->worker_ = std::thread([self] { self->work(); });
  if (!cfg.prefill_peers.empty()) c->selftest_ = std::thread([self] { self->selftests(); });
  c->heartbeat_ = std::thread([self] { self->heartbeat(); });
  return c;
}

DecodeCoordinator::~DecodeCoordinator() { stop(); }

void DecodeCoordinator::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (selftest_.joinable()) selftest_.join();
}

Status DecodeCoordinator::prepare(const std::string& host, int port, uint64_t room, const std::vector<int32_t>& prompt) {
  const std::string key = host + ":" + std::to_string(port);
  // Before any connection or bookkeeping: an address outside the allowlist is never contacted.
  if (!cfg_.prefill_allowed(host, port))
    return invalid_argument("bootstrap_host: " + key + " is not an allowed prefill bootstrap server of this decode server (--allow-prefill)");
  std::shared_ptr<Prefill> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = prefills_[key];
    if (!slot) {
      slot = std::make_shared<Prefill>();
      slot->host = host;
      slot->port = port;
    }
    p = slot;
  }
  bool known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = p->has_layout;
  }
  if (!known) {
    PDS_RETURN_IF_ERROR(lookup_layout(p));
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    PDS_RETURN_IF_ERROR(check_pair(p->layout, layout_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status(ErrorCode::kUnavailable, "decode server is shutting down");
  if (rooms_.count(room)) return invalid_argument("bootstrap_room: room " + std::to_string(room) + " is already in use on this decode server");
  auto r = std::make_unique<Room>();
  r->room = room;
  r->prefill = p;
  r->prompt_len = static_cast<int64_t>(prompt.size());
  r->prompt_hash = hash_tokens(prompt);
  rooms_[room] = std::move(r);
  return Status::ok();
}

// Looked up once per prefill server (and again after it restarts or stops answering).
Status DecodeCoordinator::lookup_layout(const std::shared_ptr<Prefill>& p) {
  auto j = http_call(p->host, p->port, "GET", "/route", nullptr, 5.0, cfg_.cluster_secret);
  if (!j.is_ok()) return Status(ErrorCode::kUnavailable, j.status().message());
  PDS_ASSIGN_OR_RETURN(KvLayout l, KvLayout::from_json(*j));
  PDS_RETURN_IF_ERROR(check_pair(l, layout_));
  std::lock_guard<std::mutex> lock(mu_);
  p->layout = std::move(l);
  p->has_layout = true;
  p->misses = 0;
  spdlog::info("prefill {}: layout checked (tp {}, page_size {}, instance {})", p->key(), p->layout.tp, p->layout.page_size,
               p->layout.instance_id);
  return Status::ok();
}

Status DecodeCoordinator::run_selftest(Prefill& p) {
  static std::atomic<uint64_t> counter{1};
  const uint64_t room = (uint64_t{1} << 62) | counter.fetch_add(1);  // apart from the router's random rooms
  SelfTestRequest t;
  t.room = room;
  t.generation = next_generation_.fetch_add(1);
  const transfer::PeerAddress addr = transport_->local_address();
  t.transfer_host = addr.host;
  t.transfer_port = addr.port;
  t.length = scratch_.size();
  t.nonce = std::chrono::steady_clock::now().time_since_epoch().count() ^ (room * 0x9e3779b97f4a7c15ull);
  std::fill(scratch_.begin(), scratch_.end(), 0);
  PDS_RETURN_IF_ERROR(transport_->grant({room, kSelfTestRegion, 0, t.length, t.generation}));
  const Json body = t.to_json();
  auto res = http_call(p.host, p.port, "POST", "/selftest", &body, 15.0, cfg_.cluster_secret);
  (void)transport_->revoke(room);  // every write has landed or been refused
  if (!res.is_ok()) return res.status();
  return check_pattern(scratch_.data(), t.length, t.nonce);
}

// Until every configured peer passed: handshake, then a real transfer checked byte for byte.
void DecodeCoordinator::selftests() {
  for (;;) {
    std::vector<std::shared_ptr<Prefill>> todo;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (auto& [k, p] : prefills_)
        if (p->configured && !p->selftest_passed) todo.push_back(p);
      if (todo.empty() || stopping_) return;
    }
    for (auto& p : todo) {
      Status st = lookup_layout(p);
      if (st.is_ok()) st = run_selftest(*p);
      std::lock_guard<std::mutex> lock(mu_);
      if (st.is_ok()) {
        p->selftest_passed = true;
        p->selftest_error.clear();
        spdlog::info("prefill {}: self-test passed ({} bytes through the transport, checked byte for byte)", p->key(),
                     scratch_.size());
      } else if (st.message() != p->selftest_error) {
        p->selftest_error = st.message();
        spdlog::warn("prefill {}: self-test failed (retrying every {} s): {}", p->key(), cfg_.selftest_retry_s, st.message());
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, secs(cfg_.selftest_retry_s), [&] { return stopping_; });
  }
}

bool DecodeCoordinator::healthy(std::string* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, p] : prefills_)
    if (p->configured && !p->selftest_passed) {
      if (why) *why = "self-test with prefill " + k + " has not passed: " + p->selftest_error;
      return false;
    }
  return true;
}

void DecodeCoordinator::drop(uint64_t room) {
  std::lock_guard<std::mutex> lock(mu_);
  rooms_.erase(room);
}

void DecodeCoordinator::refuse(const std::string& host, int port, uint64_t room, const std::string& why) {
  if (!cfg_.prefill_allowed(host, port)) return;  // never post to an address outside the allowlist
  Json body{{"room", room}, {"reason", "decode refused the request: " + why}};
  post([host, port, body, secret = cfg_.cluster_secret] { (void)http_call(host, port, "POST", "/abort", &body, 2.0, secret); });
}

void DecodeCoordinator::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

// mu_ held.
void DecodeCoordinator::fail_room_locked(Room& r, const Status& why) {
  if (r.finished || r.request_id == 0) return;
  r.finished = true;
  r.why = why.message();
  spdlog::warn("room {}: failed: {}", r.room, why.message());
  engine_->fail(r.request_id, why);
}

void DecodeCoordinator::on_kv_reserved(uint64_t id, uint64_t room, const runtime::Sequence& seq) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) {
    engine_->fail(id, internal_error("decode: room " + std::to_string(room) + " was not prepared"));
    return;
  }
  Room& r = *it->second;
  r.request_id = id;
  r.generation = next_generation_.fetch_add(1);
  r.slot = seq.slot;
  r.prompt_pages = (r.prompt_len + layout_.page_size - 1) / layout_.page_size;
  std::vector<int32_t> pages(seq.pages.begin(), seq.pages.begin() + r.prompt_pages);
  aux_[static_cast<size_t>(seq.slot)] = AuxRow{};  // a row left from an earlier room can never pass the check
  for (const transfer::Grant& g : room_grants(layout_, room, r.generation, pages, seq.slot, seq.slot)) {
    if (Status st = transport_->grant(g); !st.is_ok()) {
      fail_room_locked(r, internal_error("decode: granting room " + std::to_string(room) + " failed: " + st.message()));
      return;
    }
  }
  r.reserved = true;
  r.pages = pages;
  r.reserved_at = Clock::now();
  metrics_.room_started();
  RoomTarget t;
  t.room = room;
  t.generation = r.generation;
  t.decode = layout_;
  const transfer::PeerAddress addr = transport_->local_address();
  t.transfer_host = addr.host;
  t.transfer_port = addr.port;
  t.pages = std::move(pages);
  t.slot = seq.slot;
  t.aux_row = seq.slot;
  t.prompt_len = r.prompt_len;
  t.prompt_hash = r.prompt_hash;
  std::shared_ptr<Prefill> p = r.prefill;
  lock.unlock();
  post([this, p, room, body = t.to_json()] {
    auto res = http_call(p->host, p->port, "POST", "/target", &body, 5.0, cfg_.cluster_secret);
    if (res.is_ok()) return;
    std::lock_guard<std::mutex> l(mu_);
    auto it2 = rooms_.find(room);
    if (it2 != rooms_.end())
      fail_room_locked(*it2->second, Status(ErrorCode::kUnavailable, "handing room to prefill failed: " + res.status().message()));
  });
}

void DecodeCoordinator::on_release(uint64_t, uint64_t room, const runtime::Sequence&) {
  // Before the pages and slot go back: no write of this room may land after this returns.
  (void)transport_->revoke(room);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return;
  Room& r = *it->second;
  if (r.reserved && !r.landed) {
    r.prefill->rooms_failed += 1;
    RoomRecord rec;
    rec.room = room;
    rec.request_id = r.request_id;
    rec.peer = r.prefill->key();
    rec.seconds = std::chrono::duration<double>(Clock::now() - r.reserved_at).count();
    rec.error = r.why.empty() ? "decode released the request before its KV landed" : r.why;
    metrics_.room_ended(rec);
    std::shared_ptr<Prefill> p = r.prefill;
    Json body{{"room", room}, {"reason", "decode released the request before its KV landed"}};
    jobs_.push_back([p, body, secret = cfg_.cluster_secret] { (void)http_call(p->host, p->port, "POST", "/abort", &body, 2.0, secret); });
    cv_.notify_all();
  }
  rooms_.erase(it);
}

void DecodeCoordinator::on_notify(uint64_t room, const std::string& payload) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || it->second->finished || !it->second->reserved) return;
  Room& r = *it->second;
  auto untrusted = [&](Room& rr, const std::string& why) {
    fail_room_locked(rr, Status(ErrorCode::kUnavailable, "KV transfer for room " + std::to_string(room) + " is not trustworthy: " + why));
  };
  if (payload.rfind("fail:", 0) == 0)
    return fail_room_locked(r, Status(ErrorCode::kUnavailable, "prefill failed room " + std::to_string(room) + ": " + payload.substr(5)));
  if (payload.rfind("ok", 0) != 0)
    return fail_room_locked(r, Status(ErrorCode::kUnavailable, "prefill sent an unknown notice for room " + std::to_string(room)));
  auto first = check_aux_row(aux_[static_cast<size_t>(r.slot)], room, r.generation, r.prompt_len);
  if (!first.is_ok()) return untrusted(r, first.status().message());
  if (layout_.checksum && (payload.size() < 4 || !std::isdigit(static_cast<unsigned char>(payload[3]))))
    return untrusted(r, "prefill sent no checksum");
  // What the hash needs, copied: it runs without mu_, which the engine thread takes in its
  // hooks (a large room's bytes must not stall every other request's admission or release).
  const std::shared_ptr<Prefill> prefill = r.prefill;
  const KvLayout src = prefill->layout;  // a restart re-lookup may rewrite it under mu_
  const std::vector<int32_t> pages = r.pages;
  const int64_t prompt_pages = r.prompt_pages;
  const int32_t slot = r.slot;
  lock.unlock();

  std::optional<std::string> mismatch;
  if (layout_.checksum) {
    // Everything landed before the notice: hash what is in our pools, unit by unit.
    const uint64_t want = std::strtoull(payload.c_str() + 3, nullptr, 10);
    uint64_t got = 0;
    for (const auto& u : page_units(src, layout_, pages, pages, 0, prompt_pages))
      got += unit_hash(u, bases_.at(u.remote_region) + u.remote_offset);
    auto state = state_writes(src, layout_, 0, slot);
    if (!state.is_ok()) mismatch = state.status().message();
    else
      for (const auto& u : *state) got += unit_hash(u, bases_.at(u.remote_region) + u.remote_offset);
    const transfer::WriteOp aux = aux_write(0, slot);
    got += unit_hash(aux, bases_.at(aux.remote_region) + aux.remote_offset);
    if (!mismatch && got != want)
      mismatch = "checksum mismatch (prefill " + std::to_string(want) + ", decode " + std::to_string(got) +
                 "): a page, state run or aux row changed in flight";
  }

  lock.lock();
  it = rooms_.find(room);
  if (it == rooms_.end() || it->second->finished) return;  // released (aborted) while we hashed
  Room& rr = *it->second;
  if (mismatch) return untrusted(rr, *mismatch);
  rr.finished = true;
  rr.landed = true;
  const uint64_t id = rr.request_id;
  const uint64_t bytes = room_bytes(src, layout_, prompt_pages);
  const double secs_spent = std::chrono::duration<double>(Clock::now() - rr.reserved_at).count();
  prefill->rooms_ok += 1;
  prefill->bytes += bytes;
  lock.unlock();
  (void)transport_->revoke(room);  // the pages are decode's alone from here on
  RoomRecord rec;
  rec.room = room;
  rec.request_id = id;
  rec.peer = prefill->key();
  rec.ok = true;
  rec.bytes = bytes;
  rec.runs = notice_runs(payload);
  rec.batches = 1;  // one landing per room on this side
  rec.seconds = secs_spent;
  metrics_.room_ended(rec);
  spdlog::debug("room {} from prefill {}: {} bytes in {:.3f} ms ({:.3f} GB/s, reservation to landing)", room,
                prefill->key(), bytes, secs_spent * 1e3, secs_spent > 0 ? bytes / secs_spent / 1e9 : 0.0);
  engine_->kv_ready(id, std::move(first).value());
}

void DecodeCoordinator::on_room_failed(uint64_t room, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return;
  fail_room_locked(*it->second, Status(ErrorCode::kUnavailable, "KV transfer for room " + std::to_string(room) + " failed: " + why.message()));
}

// Jobs in order, and the waiting timeout.
void DecodeCoordinator::work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_ || !jobs_.empty(); });
    while (!jobs_.empty() && !stopping_) {
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
    const auto now = Clock::now();
    for (auto& [room, r] : rooms_)
      if (r->reserved && !r->finished && now - r->reserved_at > secs(cfg_.waiting_timeout_s))
        fail_room_locked(*r, Status(ErrorCode::kDeadlineExceeded,
                                    "decode waited " + std::to_string(cfg_.waiting_timeout_s) + " s for room " +
                                        std::to_string(room) + "'s KV from prefill " + r->prefill->key()));
  }
}

// Every prefill server this decode talks to must answer /health with the same instance id;
// after heartbeat_misses misses (or a restart) every room waiting on it fails.
void DecodeCoordinator::heartbeat() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, secs(cfg_.heartbeat_interval_s), [&] { return stopping_; });
    if (stopping_) break;
    std::vector<std::shared_ptr<Prefill>> ps;
    for (auto& [k, p] : prefills_)
      if (p->has_layout) ps.push_back(p);
    lock.unlock();
    std::vector<std::pair<std::shared_ptr<Prefill>, std::string>> lost;
    for (auto& p : ps) {
      auto j = http_call(p->host, p->port, "GET", "/health", nullptr, cfg_.heartbeat_interval_s, cfg_.cluster_secret);
      std::string why;
      if (!j.is_ok()) why = "stopped answering heartbeats (" + j.status().message() + ")";
      else if (j->value("instance_id", std::string()) != p->layout.instance_id) why = "restarted (new instance id)";
      lost.emplace_back(p, why);
    }
    lock.lock();
    for (auto& [p, why] : lost) {
      if (why.empty()) {
        p->misses = 0;
        continue;
      }
      if (++p->misses < cfg_.heartbeat_misses && why.find("restarted") == std::string::npos) continue;
      spdlog::warn("prefill {} {}: failing its rooms", p->key(), why);
      p->has_layout = false;  // look it up again on the next request
      p->misses = 0;
      for (auto& [room, r] : rooms_)
        if (r->prefill == p && r->reserved && !r->finished)
          fail_room_locked(*r, Status(ErrorCode::kUnavailable, "prefill " + p->key() + " " + why));
    }
  }
}

Json DecodeCoordinator::info() const {
  const transfer::MetricsSnapshot tm = transport_->metrics();
  std::lock_guard<std::mutex> lock(mu_);
  Json prefills = Json::array();
  for (const auto& [k, p] : prefills_)
    prefills.push_back(Json{{"bootstrap", k}, {"checked", p->has_layout}, {"tp", p->layout.tp},
                            {"instance_id", p->layout.instance_id}, {"configured", p->configured},
                            {"selftest", p->configured ? (p->selftest_passed ? "passed" : p->selftest_error) : "not configured"},
                            {"rooms_ok", p->rooms_ok}, {"rooms_failed", p->rooms_failed}, {"bytes", p->bytes}});
  return Json{{"role", "decode"},
              {"layout", layout_.to_json()},
              {"transport", transport_->capabilities().name},
              {"transfer_address", transport_->local_address().to_string()},
              {"prefills", prefills},
              {"rooms", rooms_.size()},
              {"transfer", metrics_.snapshot().to_json()},
              {"transport_counters", {{"bytes_received", tm.bytes_received},
                                      {"writes_refused", tm.writes_refused},
                                      {"notifications", tm.notifications}}},
              {"config", cfg_.to_json()}};
}

}  // namespace pdserve::disagg
