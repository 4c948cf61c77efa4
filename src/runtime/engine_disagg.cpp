// The engine's side of prefill/decode disaggregation: control messages from the
// coordinator (KV landed, send finished, fail), applied on the engine thread.
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
