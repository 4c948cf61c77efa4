// One HTTP call to a worker, run on a pump thread so the handler thread can wait on several
// calls at once (PD: prefill and decode) and relay a body while it is still arriving.
//
// Every call of one client request shares an Exchange: a mutex guarding the calls' state and
// a condition variable signalled on every change (headers, chunk, end). Readers lock
// ex->mu and use the *_locked accessors.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "task_pool.h"
#include "worker.h"

namespace pdserve::router {

using Clock = std::chrono::steady_clock;

struct Exchange {
  std::mutex mu;
  std::condition_variable cv;
};

enum class CallError {
  kNone,
  kConnect,    // never reached the worker: safe to retry elsewhere
  kTransport,  // the connection broke after the request was sent
  kTimeout,
  kCancelled,
};
const char* call_error_name(CallError e);

struct CallSpec {
  std::string method = "POST";
  std::string path;
  httplib::Headers headers;
  std::string body;
  std::string content_type = "application/json";
  Clock::time_point deadline;
  double connect_timeout_s = 3;
  // Bounded relay: the receiver blocks past this many queued bytes (backpressure to the worker).
  size_t max_queued_bytes = 1 << 20;
  // Drain mode (prefill): keep only the first `keep_bytes` of the body, never block.
  bool drain = false;
  size_t keep_bytes = 16 << 10;
  std::string request_id;  // for logs
};

class UpstreamCall;

// Every live call, so stop() can cancel them; a call added after close() is cancelled at once.
// A janitor thread re-sends stop() to cancelled calls that are still running: a cancel that
// lands while httplib is still connecting finds no socket to shut down, so one try is not
// enough.
class CallRegistry {
 public:
  CallRegistry();
  ~CallRegistry();
  void add(const std::shared_ptr<UpstreamCall>& c);
  void remove(UpstreamCall* c);
  void close_and_cancel_all();

 private:
  void janitor();

  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false, exit_ = false;
  std::unordered_map<UpstreamCall*, std::weak_ptr<UpstreamCall>> calls_;
  std::thread janitor_;
};

class UpstreamCall {
 public:
  static std::shared_ptr<UpstreamCall> start(std::shared_ptr<Exchange> ex, std::shared_ptr<Worker> worker,
                                             CallSpec spec, TaskPool& pumps, CallRegistry& registry);

  Worker& worker() { return *worker_; }
  Exchange& exchange() { return *ex_; }

  // --- with ex->mu held ---
  bool has_headers_locked() const { return has_headers_; }
  bool finished_locked() const { return finished_; }
  int status_locked() const { return status_; }
  const httplib::Headers& headers_locked() const { return headers_; }
  CallError error_locked() const { return error_; }
  const std::string& error_text_locked() const { return error_text_; }
  bool has_chunk_locked() const { return !chunks_.empty(); }
  std::string pop_chunk_locked();
  // Everything received and not popped (drain mode: the kept prefix).
  std::string take_body_locked();
  // Failed = ended with a transport error, or answered with a non-2xx status.
  bool failed_locked() const { return finished_ && (error_ != CallError::kNone || status_ < 200 || status_ >= 300); }

  // Makes the pump give up: closes the socket so a blocked read returns. Idempotent.
  void cancel();
  // Repeats the socket shutdown of a cancelled, still-running call (see CallRegistry).
  void restop();

 private:
  UpstreamCall(std::shared_ptr<Exchange> ex, std::shared_ptr<Worker> w, CallSpec spec)
      : ex_(std::move(ex)), worker_(std::move(w)), spec_(std::move(spec)) {}
  void run();
  std::shared_ptr<httplib::Client> take_client(bool fresh, bool* reused);
  bool should_resend(httplib::Error err);
  void finish(CallError e, std::string text);

  std::shared_ptr<Exchange> ex_;
  std::shared_ptr<Worker> worker_;
  CallSpec spec_;
  Clock::time_point started_;

  // Guarded by ex_->mu.
  bool has_headers_ = false, finished_ = false, cancelled_ = false;
  int status_ = 0;
  httplib::Headers headers_;
  std::deque<std::string> chunks_;
  size_t queued_ = 0;
  CallError error_ = CallError::kNone;
  std::string error_text_;
  // Set while a request is on the wire, for cancel(). Shared so cancel() can stop() it
  // outside the lock; a cancelled call never returns its connection to the pool.
  std::shared_ptr<httplib::Client> client_;
};

}  // namespace pdserve::router
