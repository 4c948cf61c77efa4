// The engine thread: take new requests and aborts, then admit -> plan -> forward -> sample,
// one step at a time. Everything that mutates the pools happens on this thread.
#include "pdserve/runtime/engine.h"

#include <spdlog/spdlog.h>

#include "engine_live.h"

namespace pdserve::runtime {

// ---- RequestChannel / RequestHandle ----

void RequestChannel::post(RequestEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

std::optional<RequestEvent> RequestChannel::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return std::nullopt;
  RequestEvent ev = std::move(q_.front());
  q_.pop_front();
  return ev;
}

RequestHandle& RequestHandle::operator=(RequestHandle&& o) noexcept {
  if (this != &o) {
    abort();
    engine_ = o.engine_;
    id_ = o.id_;
    ch_ = std::move(o.ch_);
    finished_ = o.finished_;
    o.engine_ = nullptr;
    o.finished_ = true;
  }
  return *this;
}

std::optional<RequestEvent> RequestHandle::next(std::chrono::milliseconds timeout) {
  if (!ch_ || finished_) return std::nullopt;
  auto ev = ch_->next(timeout);
  if (ev && ev->finished) finished_ = true;
  return ev;
}

RequestEvent RequestHandle::wait() { return *wait_unless([] { return false; }); }

std::optional<RequestEvent> RequestHandle::wait_unless(const std::function<bool()>& abandoned) {
  constexpr auto kCheckEvery = std::chrono::milliseconds(100);
  RequestEvent all;
  auto next_check = std::chrono::steady_clock::now() + kCheckEvery;
  while (!finished_) {
    auto ev = next(kCheckEvery);
    // Tokens may arrive faster than the check interval: check by the clock, not on idle.
    if (!finished_ && std::chrono::steady_clock::now() >= next_check) {
      if (abandoned()) {
        abort();
        return std::nullopt;
      }
      next_check = std::chrono::steady_clock::now() + kCheckEvery;
    }
    if (!ev) continue;
    all.token_ids.insert(all.token_ids.end(), ev->token_ids.begin(), ev->token_ids.end());
    all.text += ev->text;
    for (auto& lp : ev->logprobs) all.logprobs.push_back(std::move(lp));
    all.finished = ev->finished;
    all.finish_reason = ev->finish_reason;
    all.error = ev->error;
    all.prompt_tokens = ev->prompt_tokens;
    all.completion_tokens = ev->completion_tokens;
  }
  return all;
}

void RequestHandle::abort() {
  if (engine_ && ch_ && !finished_) {
    ch_->request_abort();
    engine_->notify_abort();
  }
  finished_ = true;
}

// ---- Engine ----

Result<std::unique_ptr<Engine>> Engine::create(RuntimeConfig cfg, std::shared_ptr<const Model> model,
                                               std::shared_ptr<const tokenizer::Tokenizer> tok) {
  return create(std::move(cfg), TpModelGroup::from_model(std::move(model)), std::move(tok));
}

Result<std::unique_ptr<Engine>> Engine::create(RuntimeConfig cfg, std::unique_ptr<TpModelGroup> group,
                                               std::shared_ptr<const tokenizer::Tokenizer> tok) {
  cfg.resolve(group->config());
  PDS_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<Engine> e(new Engine());
  e->cfg_ = cfg;
  e->group_ = std::move(group);
  e->tok_ = std::move(tok);
  e->group_->make_pools(cfg.num_pages, cfg.page_size, cfg.max_running, cfg.kv_cache_dtype);
  e->sched_ = std::make_unique<SchedulerBox>(SchedulerBox{
      Scheduler({cfg.max_running, cfg.chunk_size, cfg.step_token_budget}, e->group_->kv(0), e->group_->state(0))});
  return e;
}

Engine::~Engine() { stop(); }

void Engine::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Requests that never reached the thread (or when it never started).
  take_inbox();
  std::vector<Live*> all;
  for (auto& [id, r] : live_) all.push_back(r.get());
  for (Live* r : all) finish(*r, FinishReason::kAbort);
}

void Engine::notify_abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    has_aborts_ = true;
  }
  cv_.notify_all();
}

Status Engine::check(const GenerateRequest& req) const {
  PDS_RETURN_IF_ERROR(req.sampling.validate());
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  if (n == 0) return invalid_argument("prompt: must not be empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model().config().vocab_size)
      return invalid_argument("prompt: token id " + std::to_string(t) + " is outside the vocabulary");
  if (n + req.sampling.max_tokens > cfg_.max_model_len)
    return invalid_argument("prompt (" + std::to_string(n) + " tokens) + max_tokens (" +
                            std::to_string(req.sampling.max_tokens) + ") exceeds the context limit " +
                            std::to_string(cfg_.max_model_len));
  const int64_t reserve_tokens = req.disagg == DisaggMode::kPrefillOnly ? 1 : req.sampling.max_tokens;
  return sched_->s.check_fits(n, reserve_tokens);
}

Result<RequestHandle> Engine::submit(GenerateRequest req) {
  PDS_RETURN_IF_ERROR(req.sampling.validate());
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  if (n == 0) return invalid_argument("prompt: must not be empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model().config().vocab_size)
      return invalid_argument("prompt: token id " + std::to_string(t) + " is outside the vocabulary");
  if (n + req.sampling.max_tokens > cfg_.max_model_len) {
    metrics_.count_rejected();
    return invalid_argument("prompt (" + std::to_string(n) + " tokens) + max_tokens (" +
                            std::to_string(req.sampling.max_tokens) + ") exceeds the context limit " +
                            std::to_string(cfg_.max_model_len));
  }
  // Prefill role: one token is generated here, whatever the client asked decode for.
  const int64_t reserve_tokens = req.disagg == DisaggMode::kPrefillOnly ? 1 : req.sampling.max_tokens;
  if (Status st = sched_->s.check_fits(n, reserve_tokens); !st.is_ok()) {
    metrics_.count_rejected();
    return st;
  }
  auto live = std::make_unique<Live>(std::move(req), *tok_, seed_counter_.fetch_add(0x9e3779b97f4a7c15ull));
  Live& r = *live;
  r.seq.tokens = r.req.prompt;
  r.seq.prompt_len = n;
  r.seq.max_tokens = reserve_tokens;
  r.seq.remote_kv = r.req.disagg == DisaggMode::kDecodeOnly;
  r.stop_ids = r.req.sampling.stop_token_ids;
  if (!r.req.sampling.ignore_eos) r.stop_ids.insert(r.stop_ids.end(), r.req.eos_token_ids.begin(), r.req.eos_token_ids.end());
  std::sort(r.stop_ids.begin(), r.stop_ids.end());
  std::shared_ptr<RequestChannel> ch = r.ch;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(ErrorCode::kUnavailable, "the engine is shutting down");
    if (in_system_ >= cfg_.max_running + cfg_.max_queue) {
      metrics_.count_rejected();
      return Status(ErrorCode::kUnavailable, "server overloaded: " + std::to_string(in_system_) +
                                                 " requests running or queued; retry later");
    }
    ++in_system_;
    id = next_id_++;
    r.seq.id = id;
    inbox_.push_back(std::move(live));
    waiting_.fetch_add(1);
  }
  cv_.notify_all();
  return RequestHandle(this, id, std::move(ch));
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.running = running_.load();
  s.waiting = waiting_.load();
  s.pages_total = group_->kv(0).num_pages();
  s.pages_used = group_->kv(0).used_pages();
  s.slots_total = group_->state(0).num_slots();
  s.slots_used = group_->state(0).used_slots();
  s.steps = steps_.load();
  return s;
}

void Engine::take_inbox() {
  std::vector<std::unique_ptr<Live>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(inbox_);
  }
  for (auto& r : fresh) {
    metrics_.add_prompt_tokens(static_cast<uint64_t>(r->seq.prompt_len));
    sched_->s.enqueue(&r->seq);
    const uint64_t id = r->seq.id;
    live_[id] = std::move(r);
  }
}

void Engine::take_aborts() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!has_aborts_) return;
    has_aborts_ = false;
  }
  std::vector<Live*> gone;
  for (auto& [id, r] : live_)
    if (r->ch->abort_requested()) gone.push_back(r.get());
  for (Live* r : gone) finish(*r, FinishReason::kAbort);
}

// Frees first, then posts: a caller that has seen the final event can rely on the
// request's pages and slot being back in the pools.
void Engine::finish(Live& r, FinishReason reason, Status error, std::optional<RequestEvent> final_event) {
  if (r.seq.state == RequestState::kQueued) waiting_.fetch_sub(1);
  if (r.req.disagg != DisaggMode::kNone && hooks_.on_release) hooks_.on_release(r.seq.id, r.req.room, r.seq);
  Status st = sched_->s.release(&r.seq);
  if (!st.is_ok()) spdlog::error("request {}: releasing its cache failed: {}", r.seq.id, st.message());
  running_.store(sched_->s.num_running());
  if (!final_event) {
    final_event.emplace();
    final_event->finished = true;
    final_event->finish_reason = reason;
    final_event->error = std::move(error);
    final_event->prompt_tokens = r.seq.prompt_len;
    final_event->completion_tokens = r.seq.num_generated();
  }
  metrics_.count_finish(static_cast<int>(reason));
  metrics_.e2e().observe(std::chrono::duration<double>(Clock::now() - r.arrival).count());
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_system_;
  }
  r.ch->post(std::move(*final_event));
  live_.erase(r.seq.id);  // r is gone after this
}

void Engine::expire_deadlines() {
  if (cfg_.request_timeout_s <= 0) return;
  const auto limit = std::chrono::duration<double>(cfg_.request_timeout_s);
  const auto now = Clock::now();
  std::vector<Live*> late;
  for (auto& [id, r] : live_)
    if (now - r->arrival > limit) late.push_back(r.get());
  for (Live* r : late) {
    spdlog::warn("request {}: still running after request_timeout_s = {} s; finishing it", r->seq.id, cfg_.request_timeout_s);
    finish(*r, FinishReason::kError,
           Status(ErrorCode::kDeadlineExceeded,
                  fmt::format("request timed out: still running after {} s (request_timeout_s)", cfg_.request_timeout_s)));
  }
}

// Sleeps when the last step ran nothing: requests waiting for KV, for a send to end or for
// pages held by those can only move on an event (new request, abort, control message).
void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || has_aborts_ || !inbox_.empty() || !controls_.empty() || runnable_; };
      // With a deadline, idle waits wake up now and then so that requests parked on a peer
      // (awaiting KV, sending KV) still expire.
      if (cfg_.request_timeout_s > 0 && !live_.empty()) cv_.wait_for(lock, std::chrono::milliseconds(200), ready);
      else cv_.wait(lock, ready);
      if (stop_) return;
    }
    take_inbox();
    take_aborts();
    take_controls();
    expire_deadlines();
    runnable_ = step();
  }
}

}  // namespace pdserve::runtime
