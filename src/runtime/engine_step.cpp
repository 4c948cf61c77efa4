// One engine step: admit, plan, run the forward on the mixed batch, then turn each
// sampling row into a token, final text and maybe a finish.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine_live.h"

namespace pdserve::runtime {

bool Engine::step() {
  Scheduler& sched = sched_->s;
  std::vector<Sequence*> admitted;
  if (sched.admit(&admitted) > 0) waiting_.fetch_sub(static_cast<int64_t>(admitted.size()));
  running_.store(sched.num_running());
  for (Sequence* s : admitted)
    if (s->state == RequestState::kAwaitingKv && hooks_.on_kv_reserved) hooks_.on_kv_reserved(s->id, live_.at(s->id)->req.room, *s);
  const StepPlan plan = sched.plan();
  if (plan.empty()) return false;

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
  Status st = group_->forward(batch, &out);
  steps_.fetch_add(1);
  if (!st.is_ok()) {
    // The batch's states are now unknown: fail those requests, keep serving the rest.
    spdlog::error("forward failed: {}", st.message());
    for (const StepItem& it : plan.items) finish(*live_.at(it.seq->id), FinishReason::kError, st);
    return true;
  }
  sched.commit(plan);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const StepItem& it = plan.items[i];
    Live& r = *live_.at(it.seq->id);
    if (out.seq_failed(i)) {
      // The pipeline's stages agreed this request failed (some stage failed it): it ends
      // here, and finishing frees its pages and slot, which every stage indexes alike.
      spdlog::error("request {} failed in the pipeline: {}", r.seq.id, out.seq_status[i].message());
      finish(r, FinishReason::kError, out.seq_status[i]);
      continue;
    }
    if (r.req.disagg == DisaggMode::kPrefillOnly) {
      // The hooks below send from the host pools: bring this chunk's pages there first (and
      // the state slot with the last chunk, when the prompt's state is final).
      if (Status cs = copy_chunk_to_host(r.seq, it.begin, it.count, it.samples); !cs.is_ok()) {
        finish(r, FinishReason::kError, cs);
        continue;
      }
    }
    if (it.samples) on_logits(r, out.row(i));
    else if (r.req.disagg == DisaggMode::kPrefillOnly && hooks_.on_chunk_done) hooks_.on_chunk_done(r.seq.id, r.req.room, r.seq);
  }
  return true;
}

void Engine::on_logits(Live& r, const float* logits) {
  const int64_t vocab = model().config().vocab_size;
  SampleResult s = r.sampler.sample(std::span<const float>(logits, static_cast<size_t>(vocab)));
  if (r.req.disagg == DisaggMode::kPrefillOnly) {
    // The token travels to decode in the aux row; this side only holds the cache until sent.
    r.seq.tokens.push_back(s.token);
    sched_->s.hold_for_send(&r.seq);
    running_.store(sched_->s.num_running());
    if (hooks_.on_prefill_done) hooks_.on_prefill_done(r.seq.id, r.req.room, r.seq, FirstToken{s.token, s.logprob});
    return;
  }
  r.seq.tokens.push_back(s.token);
  emit_token(r, s.token, std::move(s.logprob));
}

// `token` is already the last of r.seq.tokens.
void Engine::emit_token(Live& r, int32_t token, TokenLogprob logprob) {
  SampleResult s{token, std::move(logprob)};
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
