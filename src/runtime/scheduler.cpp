#include "pdserve/runtime/scheduler.h"

#include <algorithm>

namespace pdserve::runtime {

Scheduler::Scheduler(SchedulerLimits limits, MlaKvPool& kv, KdaStatePool& state)
    : limits_(limits), kv_(kv), state_(state) {}

Status Scheduler::check_fits(int64_t prompt_len, int64_t max_tokens) const {
  const int64_t need = kv_.pages_for_tokens(prompt_len + max_tokens);
  if (need > kv_.num_pages())
    return invalid_argument("prompt (" + std::to_string(prompt_len) + " tokens) + max_tokens (" +
                            std::to_string(max_tokens) + ") needs " + std::to_string(need) +
                            " KV pages, more than the server's " + std::to_string(kv_.num_pages()));
  if (state_.num_slots() < 1) return invalid_argument("the server has no KDA state slots");
  return Status::ok();
}

void Scheduler::enqueue(Sequence* seq) {
  seq->state = RequestState::kQueued;
  waiting_.push_back(seq);
}

bool Scheduler::can_admit(const Sequence& seq) const {
  return num_running() < limits_.max_running && state_.can_allocate() &&
         kv_.can_allocate(kv_.pages_for_tokens(seq.reserved_tokens()));
}

Status Scheduler::allocate(Sequence& seq) {
  PDS_ASSIGN_OR_RETURN(seq.pages, kv_.allocate(kv_.pages_for_tokens(seq.reserved_tokens())));
  auto slot = state_.allocate();
  if (!slot.is_ok()) {
    (void)kv_.free(seq.pages);  // keep the two pools consistent
    seq.pages.clear();
    return slot.status();
  }
  seq.slot = *slot;
  return Status::ok();
}

// First come, first served: the head of the queue blocks the rest, so a long request is
// never starved by a stream of short ones.
int64_t Scheduler::admit(std::vector<Sequence*>* admitted) {
  int64_t n = 0;
  while (!waiting_.empty() && can_admit(*waiting_.front())) {
    Sequence* seq = waiting_.front();
    if (!allocate(*seq).is_ok()) break;
    waiting_.pop_front();
    seq->state = seq->remote_kv ? RequestState::kAwaitingKv : RequestState::kPrefill;
    seq->cached_len = 0;
    running_.push_back(seq);
    if (admitted) admitted->push_back(seq);
    ++n;
  }
  return n;
}

StepPlan Scheduler::plan() const {
  StepPlan plan;
  int64_t budget = limits_.step_token_budget;
  // Decode first: one token each keeps inter-token latency flat while prefills come and go.
  for (Sequence* s : running_) {
    if (budget == 0) break;
    if (s->state != RequestState::kDecode || s->pending() != 1) continue;
    plan.items.push_back({s, s->cached_len, 1, true});
    --budget;
    ++plan.num_decode;
  }
  for (Sequence* s : running_) {
    if (budget == 0) break;
    if (s->state != RequestState::kPrefill || s->pending() < 1) continue;
    const int64_t n = std::min({s->pending(), limits_.chunk_size, budget});
    plan.items.push_back({s, s->cached_len, n, s->cached_len + n == static_cast<int64_t>(s->tokens.size())});
    budget -= n;
    ++plan.num_prefill;
  }
  plan.num_tokens = limits_.step_token_budget - budget;
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const StepItem& it : plan.items) {
    it.seq->cached_len = it.begin + it.count;
    if (it.seq->state == RequestState::kPrefill && it.samples) it.seq->state = RequestState::kDecode;
  }
}

Status Scheduler::kv_arrived(Sequence* seq) {
  if (seq->state != RequestState::kAwaitingKv)
    return internal_error(std::string("KV arrived for a request in state ") + request_state_name(seq->state));
  if (static_cast<int64_t>(seq->tokens.size()) != seq->prompt_len + 1)
    return internal_error("KV arrived without exactly one first token appended");
  seq->cached_len = seq->prompt_len;
  seq->state = RequestState::kDecode;
  return Status::ok();
}

void Scheduler::hold_for_send(Sequence* seq) { seq->state = RequestState::kSendingKv; }

Status Scheduler::release(Sequence* seq) {
  Status st;
  if (!seq->pages.empty()) st = kv_.free(seq->pages);
  if (seq->slot >= 0) {
    Status s2 = state_.free(seq->slot);
    if (st.is_ok()) st = s2;
  }
  seq->pages.clear();
  seq->slot = -1;
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  seq->state = RequestState::kFinished;
  return st;
}

}  // namespace pdserve::runtime
