// The serving engine: one thread runs the scheduler and the model (continuous batching);
// callers talk to it only through submit() and the RequestHandle it returns.
//
//   caller thread                         engine thread
//   submit(req) --inbox (bounded)-------> admit / plan / forward / sample / detokenize
//   handle.next() <--per-request channel-- RequestEvent (token ids, final text, logprobs)
//   ~RequestHandle / abort() --aborts---> release pages + slot before the next step
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pdserve/model/cache_pools.h"
#include "pdserve/model/model.h"
#include "pdserve/model/tp_group.h"
#include "pdserve/runtime/metrics.h"
#include "pdserve/runtime/request.h"
#include "pdserve/runtime/runtime_config.h"
#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::runtime {

// The mailbox between the engine and one caller.
class RequestChannel {
 public:
  void post(RequestEvent ev);
  // The next event, or nullopt after `timeout`.
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
  bool abort_requested() const { return abort_.load(); }
  void request_abort() { abort_.store(true); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> q_;
  std::atomic<bool> abort_{false};
};

class Engine;

// RAII reader: destroying it (e.g. the HTTP client went away) aborts an unfinished request.
class RequestHandle {
 public:
  RequestHandle() = default;
  RequestHandle(Engine* engine, uint64_t id, std::shared_ptr<RequestChannel> ch)
      : engine_(engine), id_(id), ch_(std::move(ch)) {}
  RequestHandle(RequestHandle&& o) noexcept { *this = std::move(o); }
  RequestHandle& operator=(RequestHandle&& o) noexcept;
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;
  ~RequestHandle() { abort(); }

  uint64_t id() const { return id_; }
  bool finished() const { return finished_; }
  // Next event; nullopt on timeout. The event with finished = true is the last one.
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout = std::chrono::milliseconds(100));
  // Blocks until the end and merges every event into one (non-streaming responses).
  RequestEvent wait();
  // As wait(), but checks `abandoned` between events (at least every 100 ms): once it says
  // true (the client left), aborts the request and returns nullopt.
  std::optional<RequestEvent> wait_unless(const std::function<bool()>& abandoned);
  // Asks the engine to drop the request; no-op once finished.
  void abort();

 private:
  Engine* engine_ = nullptr;
  uint64_t id_ = 0;
  std::shared_ptr<RequestChannel> ch_;
  bool finished_ = false;
};

struct Sequence;

// The first generated token, sampled by prefill and handed to decode in the aux row.
struct FirstToken {
  int32_t token = 0;
  TokenLogprob logprob;  // filled when the request asked for logprobs
};

// What the prefill/decode coordinator (src/disagg) learns from the engine. All are called
// on the engine thread: keep them short, and answer only through the thread-safe calls
// kv_ready / kv_sent / fail (never block on the engine from inside a hook).
struct DisaggHooks {
  // Decode role: the request now holds pages and a slot; ask prefill to fill them.
  std::function<void(uint64_t id, uint64_t room, const Sequence& seq)> on_kv_reserved;
  // Prefill role: a prompt chunk is folded in; seq.cached_len tokens are final in its pages.
  std::function<void(uint64_t id, uint64_t room, const Sequence& seq)> on_chunk_done;
  // Prefill role: the whole prompt is in and the first token sampled. The request keeps its
  // pages and slot (unscheduled) until kv_sent(id, ...).
  std::function<void(uint64_t id, uint64_t room, const Sequence& seq, const FirstToken& first)> on_prefill_done;
  // Either role, for every disaggregated request, just before its pages and slot go back to
  // the pools: the hook must make sure no transfer touches them afterwards.
  std::function<void(uint64_t id, uint64_t room, const Sequence& seq)> on_release;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t pages_total = 0, pages_used = 0;
  int64_t slots_total = 0, slots_used = 0;
  int64_t steps = 0;
};

class Engine {
 public:
  // Builds pools sized from `cfg` (resolved against the model and validated here).
  static Result<std::unique_ptr<Engine>> create(RuntimeConfig cfg, std::shared_ptr<const Model> model,
                                                std::shared_ptr<const tokenizer::Tokenizer> tok);
  // Tensor parallel: `group` holds the rank shards (pools are built here).
  static Result<std::unique_ptr<Engine>> create(RuntimeConfig cfg, std::unique_ptr<TpModelGroup> group,
                                                std::shared_ptr<const tokenizer::Tokenizer> tok);
  ~Engine();

  void start();
  void stop();  // finishes every request with kAbort, joins the thread

  // kInvalidArgument: bad parameters or a request that can never fit (too long for
  // max_model_len or for the whole page pool); kUnavailable: the waiting queue is full.
  Result<RequestHandle> submit(GenerateRequest req);
  // The checks submit() makes on the request itself (not load): prefill runs them before it
  // waits for decode, so a request decode will refuse never holds a prefill thread.
  Status check(const GenerateRequest& req) const;

  // Before start(): the prefill/decode coordinator's hooks.
  void set_disagg_hooks(DisaggHooks hooks) { hooks_ = std::move(hooks); }
  // Thread-safe; a request that already finished is ignored.
  void kv_ready(uint64_t id, FirstToken first);  // decode: prefill's KV and first token landed
  void kv_sent(uint64_t id, Status status);      // prefill: the send ended (ok or why not)
  void fail(uint64_t id, Status why);            // either role: end the request with an error

  const RuntimeConfig& config() const { return cfg_; }
  const Model& model() const { return group_->model(0); }
  // The rank pools (the coordinator registers them with the transport). Page and slot ids
  // are the same on every rank; the scheduler keeps the accounting on rank 0's pools.
  TpModelGroup& group() { return *group_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  EngineStats stats() const;
  MetricsSnapshot metrics() const { return metrics_.snapshot(); }

 private:
  friend class RequestHandle;
  struct Live;  // engine-side request: sequence, sampler, detokenizer, stop matcher, channel
  Engine() = default;
  void notify_abort();
  void loop();
  bool step();  // false: nothing could run (wait for the next event)
  void take_inbox();
  void take_aborts();
  void take_controls();
  void expire_deadlines();  // finishes requests older than request_timeout_s
  void finish(Live& r, FinishReason reason, Status error = Status::ok(),
              std::optional<RequestEvent> final_event = std::nullopt);
  void on_logits(Live& r, const float* logits);           // sample, then emit_token
  void emit_token(Live& r, int32_t token, TokenLogprob lp);  // appended token: detokenize, stop checks, post
  // Prefill role with a device forward: the pages tokens [begin, begin + count) touched, and
  // the state slot when `with_slot`, device -> host pools (no-op on the CPU backend).
  Status copy_chunk_to_host(const Sequence& seq, int64_t begin, int64_t count, bool with_slot);
  // Decode role: the prompt's pages and the slot prefill filled, host -> device pools.
  Status copy_prompt_to_device(const Sequence& seq);

  struct Control {
    enum Kind { kKvReady, kKvSent, kFail } kind;
    uint64_t id;
    FirstToken first;
    Status status;
  };
  void post_control(Control c);

  RuntimeConfig cfg_;
  std::unique_ptr<TpModelGroup> group_;
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  DisaggHooks hooks_;
  struct SchedulerBox;
  std::unique_ptr<SchedulerBox> sched_;
  EngineMetrics metrics_;

  mutable std::mutex mu_;  // guards inbox_, counters below, and wakes the loop
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Live>> inbox_;
  bool stop_ = false;
  bool has_aborts_ = false;
  std::vector<Control> controls_;
  std::thread thread_;
  uint64_t next_id_ = 1;
  int64_t in_system_ = 0;  // submitted and not finished: bounded by max_running + max_queue
  std::atomic<uint64_t> seed_counter_{0x9e3779b97f4a7c15ull};

  // Engine thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Live>> live_;
  bool runnable_ = false;  // the last step ran a forward: more may be ready
  std::atomic<int64_t> waiting_{0};  // inbox + scheduler queue (for the bound and stats)
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> steps_{0};
};

}  // namespace pdserve::runtime
