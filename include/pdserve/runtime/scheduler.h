// Continuous batching as a few small steps over the page and slot pools:
//   admit()  waiting -> running while a slot, the request's whole page reservation and a
//            running place are free (two-phase: check everything, then allocate); a
//            decode-role request then waits (kAwaitingKv) for prefill to fill its pages;
//   plan()   this step's work under a token budget: one token per decoding sequence first,
//            then prefill chunks (at most chunk_size each) in admission order;
//   commit() after the forward: advance each sequence's cached length;
//   release() return a finished or aborted sequence's pages and slot at once.
// No preemption: admission reserves pages for prompt + max_tokens up front, so a running
// request can always finish (a KDA state cannot be rolled back, see docs/serving.md).
// Owned by the engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/model/cache_pools.h"
#include "pdserve/runtime/request.h"

namespace pdserve::runtime {

// The part of a request the scheduler reads and writes.
struct Sequence {
  uint64_t id = 0;
  RequestState state = RequestState::kQueued;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t max_tokens = 0;
  int64_t cached_len = 0;       // tokens already folded into pages + state
  bool remote_kv = false;       // decode role: the prompt's KV arrives from prefill
  std::vector<int32_t> pages;   // reserved for prompt_len + max_tokens tokens
  int32_t slot = -1;

  int64_t reserved_tokens() const { return prompt_len + max_tokens; }
  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - cached_len; }
};

struct SchedulerLimits {
  int64_t max_running = 16;
  int64_t chunk_size = 8192;
  int64_t step_token_budget = 8192;
};

// One sequence's share of a step: tokens[begin, begin + count).
struct StepItem {
  Sequence* seq = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
  bool samples = false;  // the chunk reaches the end of the known tokens: sample after it
};

struct StepPlan {
  std::vector<StepItem> items;
  int64_t num_tokens = 0;
  int64_t num_decode = 0;
  int64_t num_prefill = 0;
  bool empty() const { return items.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerLimits limits, MlaKvPool& kv, KdaStatePool& state);

  // A request that can never be admitted, even on an idle engine (kInvalidArgument).
  Status check_fits(int64_t prompt_len, int64_t max_tokens) const;

  void enqueue(Sequence* seq);
  // Returns how many were admitted; `admitted` (optional) receives them.
  int64_t admit(std::vector<Sequence*>* admitted = nullptr);
  StepPlan plan() const;
  void commit(const StepPlan& plan);
  // Decode role: prefill wrote the prompt's KV and state into seq's pages and slot, and the
  // first token was appended to seq.tokens; the sequence joins the decode batch.
  Status kv_arrived(Sequence* seq);
  // Prefill role: the first token is out; hold pages + slot (not scheduled) until release().
  void hold_for_send(Sequence* seq);
  // Frees pages and slot (if held), drops the sequence from the queues, marks it kFinished.
  Status release(Sequence* seq);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  const std::vector<Sequence*>& running() const { return running_; }

 private:
  bool can_admit(const Sequence& seq) const;
  Status allocate(Sequence& seq);

  SchedulerLimits limits_;
  MlaKvPool& kv_;
  KdaStatePool& state_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
};

}  // namespace pdserve::runtime
