// The engine's side of prefill/decode disaggregation: control messages from the
// coordinator (KV landed, send finished, fail), applied on the engine thread.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine_live.h"

namespace pdserve::runtime {

void Engine::post_control(Control c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    controls_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Engine::kv_ready(uint64_t id, FirstToken first) { post_control({Control::kKvReady, id, std::move(first), {}}); }
void Engine::kv_sent(uint64_t id, Status status) { post_control({Control::kKvSent, id, {}, std::move(status)}); }
void Engine::fail(uint64_t id, Status why) { post_control({Control::kFail, id, {}, std::move(why)}); }

Status Engine::copy_chunk_to_host(const Sequence& seq, int64_t begin, int64_t count, bool with_slot) {
  const int64_t ps = group_->kv(0).page_size();
  CacheRegion region;
  const int64_t last = std::min<int64_t>((begin + count + ps - 1) / ps, static_cast<int64_t>(seq.pages.size()));
  for (int64_t p = begin / ps; p < last; ++p) region.pages.push_back(seq.pages[static_cast<size_t>(p)]);
  if (with_slot) region.slot = seq.slot;
  return group_->cache_to_host(region);
}

Status Engine::copy_prompt_to_device(const Sequence& seq) {
  const int64_t ps = group_->kv(0).page_size();
  const int64_t n = std::min<int64_t>((seq.prompt_len + ps - 1) / ps, static_cast<int64_t>(seq.pages.size()));
  return group_->cache_to_device(CacheRegion{std::vector<int32_t>(seq.pages.begin(), seq.pages.begin() + n), seq.slot});
}

void Engine::take_controls() {
  std::vector<Control> todo;
  {
    std::lock_guard<std::mutex> lock(mu_);
    todo.swap(controls_);
  }
  for (Control& c : todo) {
    auto it = live_.find(c.id);
    if (it == live_.end()) continue;  // finished meanwhile (abort, timeout): nothing to do
    Live& r = *it->second;
    switch (c.kind) {
      case Control::kKvReady: {
        if (r.seq.state != RequestState::kAwaitingKv) {
          finish(r, FinishReason::kError, internal_error("KV arrived for a request that was not waiting for it"));
          break;
        }
        // Prefill wrote the host pools; a device forward reads its own, so upload first.
        if (Status st = copy_prompt_to_device(r.seq); !st.is_ok()) {
          finish(r, FinishReason::kError, st);
          break;
        }
        r.seq.tokens.push_back(c.first.token);
        if (Status st = sched_->s.kv_arrived(&r.seq); !st.is_ok()) {
          finish(r, FinishReason::kError, st);
          break;
        }
        r.sampler.observe(c.first.token);
        emit_token(r, c.first.token, std::move(c.first.logprob));
        break;
      }
      case Control::kKvSent: {
        if (!c.status.is_ok()) {
          finish(r, FinishReason::kError, std::move(c.status));
          break;
        }
        if (r.seq.state != RequestState::kSendingKv) {
          finish(r, FinishReason::kError, internal_error("KV send finished for a request that was not sending"));
          break;
        }
        RequestEvent ev;
        ev.token_ids = {r.seq.tokens.back()};
        ev.finished = true;
        ev.finish_reason = FinishReason::kLength;
        ev.prompt_tokens = r.seq.prompt_len;
        ev.completion_tokens = 1;
        finish(r, FinishReason::kLength, Status::ok(), std::move(ev));
        break;
      }
      case Control::kFail:
        finish(r, FinishReason::kError, std::move(c.status));
        break;
    }
  }
}

}  // namespace pdserve::runtime
