// One engine step: admit, plan, run the forward on the mixed batch, then turn each
// sampling row into a token, final text and maybe a finish.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine_live.h"

namespace pdserve::runtime {

void Engine::step() {
  Scheduler& sched = sched_->s;
  const int64_t admitted = sched.admit();
  if (admitted > 0) waiting_.fetch_sub(admitted);
  running_.store(sched.num_running());
  const StepPlan plan = sched.plan();
  if (plan.empty()) return;

  ForwardBatch batch;
  batch.seqs.reserve(plan.items.size());
  for (const StepItem& it : plan.items) {
    SequenceInput in;
    in.tokens.assign(it.seq->tokens.begin() + it.begin, it.seq->tokens.begin() + it.begin + it.count);
    in.cached_len = it.begin;
    in.pages = it.seq->pages;
    in.state_slot = it.seq->slot;
    batch.seqs.push_back(std::move(in));
  }
  ForwardOutput out;
  ModelCaches caches{kv_.get(), state_.get()};
  Status st = model_->forward(batch, caches, &out);
  steps_.fetch_add(1);
  if (!st.is_ok()) {
    // The batch's states are now unknown: fail those requests, keep serving the rest.
    spdlog::error("forward failed: {}", st.message());
    for (const StepItem& it : plan.items) finish(*live_.at(it.seq->id), FinishReason::kError, st);
    return;
  }
  sched.commit(plan);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if (!plan.items[i].samples) continue;
    on_logits(*live_.at(plan.items[i].seq->id), out.row(i));
  }
}

void Engine::on_logits(Live& r, const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  SampleResult s = r.sampler.sample(std::span<const float>(logits, static_cast<size_t>(vocab)));
  r.seq.tokens.push_back(s.token);
  metrics_.add_generation_tokens(1);
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - (r.seq.num_generated() == 1 ? r.arrival : r.last_token)).count();
  (r.seq.num_generated() == 1 ? metrics_.ttft() : metrics_.itl()).observe(since);
  r.last_token = now;

  RequestEvent ev;
  ev.token_ids = {s.token};
  if (r.req.sampling.logprobs) ev.logprobs.push_back(std::move(s.logprob));
  FinishReason reason = FinishReason::kNone;
  Status error;
  auto feed = [&](const std::string& text) {
    StopMatcher::Out o = r.stops.push(text);
    ev.text += o.text;
    if (o.stopped) reason = FinishReason::kStop;
  };
  if (std::binary_search(r.stop_ids.begin(), r.stop_ids.end(), s.token)) {
    reason = FinishReason::kStop;  // the stop token itself is not text
  } else {
    auto text = r.detok.push(s.token);
    if (!text.is_ok()) {
      reason = FinishReason::kError;
      error = text.status();
    } else {
      feed(*text);
    }
  }
  if (reason == FinishReason::kNone && r.seq.num_generated() >= r.seq.max_tokens) reason = FinishReason::kLength;
  if (reason == FinishReason::kLength || (reason == FinishReason::kStop && !r.stops.stopped())) {
    feed(r.detok.finish());  // a dangling partial character, then whatever was held back
    ev.text += r.stops.flush();
  }
  ev.prompt_tokens = r.seq.prompt_len;
  ev.completion_tokens = r.seq.num_generated();
  if (reason == FinishReason::kNone) {
    r.ch->post(std::move(ev));
    return;
  }
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  finish(r, reason, error, std::move(ev));
}

}  // namespace pdserve::runtime
