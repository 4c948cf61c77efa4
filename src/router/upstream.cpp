#include "upstream.h"

#include <spdlog/spdlog.h>

namespace pdserve::router {

const char* call_error_name(CallError e) {
  switch (e) {
    case CallError::kNone: return "none";
    case CallError::kConnect: return "connect failed";
    case CallError::kTransport: return "connection broken";
    case CallError::kTimeout: return "timed out";
    case CallError::kCancelled: return "cancelled";
  }
  return "?";
}

CallRegistry::CallRegistry() : janitor_([this] { janitor(); }) {}

CallRegistry::~CallRegistry() {
  {
    std::lock_guard lk(mu_);
    exit_ = true;
  }
  cv_.notify_all();
  janitor_.join();
}

void CallRegistry::janitor() {
  std::unique_lock lk(mu_);
  while (!exit_) {
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    std::vector<std::shared_ptr<UpstreamCall>> live;
    for (auto& [p, w] : calls_)
      if (auto s = w.lock()) live.push_back(std::move(s));
    lk.unlock();
    for (auto& c : live) c->restop();
    live.clear();
    lk.lock();
  }
}

void CallRegistry::add(const std::shared_ptr<UpstreamCall>& c) {
  bool closed;
  {
    std::lock_guard lk(mu_);
    closed = closed_;
    if (!closed) calls_[c.get()] = c;
  }
  if (closed) c->cancel();
}

void CallRegistry::remove(UpstreamCall* c) {
  std::lock_guard lk(mu_);
  calls_.erase(c);
}

void CallRegistry::close_and_cancel_all() {
  std::vector<std::shared_ptr<UpstreamCall>> live;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    for (auto& [p, w] : calls_)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& c : live) c->cancel();
}

std::shared_ptr<UpstreamCall> UpstreamCall::start(std::shared_ptr<Exchange> ex, std::shared_ptr<Worker> worker,
                                                  CallSpec spec, TaskPool& pumps, CallRegistry& registry) {
  std::shared_ptr<UpstreamCall> call(new UpstreamCall(std::move(ex), std::move(worker), std::move(spec)));
  call->started_ = Clock::now();
  call->worker_->call_started();
  registry.add(call);
  pumps.enqueue([call, &registry] {
    call->run();
    registry.remove(call.get());
  });
  return call;
}

std::string UpstreamCall::pop_chunk_locked() {
  std::string c = std::move(chunks_.front());
  chunks_.pop_front();
  queued_ -= c.size();
  ex_->cv.notify_all();  // a receiver may be waiting for room
  return c;
}

std::string UpstreamCall::take_body_locked() {
  std::string body;
  body.reserve(queued_);
  for (auto& c : chunks_) body += c;
  chunks_.clear();
  queued_ = 0;
  ex_->cv.notify_all();
  return body;
}

void UpstreamCall::cancel() {
  std::shared_ptr<httplib::Client> client;
  {
    std::lock_guard lk(ex_->mu);
    if (finished_ || cancelled_) return;
    cancelled_ = true;
    client = client_;
    ex_->cv.notify_all();
  }
  // shutdown() on the socket: a read blocked in the pump returns at once.
  if (client) client->stop();
}

void UpstreamCall::restop() {
  std::shared_ptr<httplib::Client> client;
  {
    std::lock_guard lk(ex_->mu);
    if (!cancelled_ || finished_) return;
    client = client_;
  }
  if (client) client->stop();
}

namespace {
void set_timeout(httplib::Client& c, void (httplib::Client::*setter)(time_t, time_t), double seconds) {
  if (seconds < 0.001) seconds = 0.001;
  const auto us = static_cast<int64_t>(seconds * 1e6);
  (c.*setter)(us / 1000000, us % 1000000);
}
}  // namespace

// Takes a client from the pool (or a new one when fresh), publishes it for cancel() and sets
// its timeouts from what is left of the deadline. Null when the call was cancelled meanwhile.
std::shared_ptr<httplib::Client> UpstreamCall::take_client(bool fresh, bool* reused) {
  std::shared_ptr<httplib::Client> client = fresh ? worker_->conns().open_new() : worker_->conns().acquire(reused);
  {
    std::lock_guard lk(ex_->mu);
    if (cancelled_) return nullptr;
    client_ = client;
  }
  const double remaining = std::chrono::duration<double>(spec_.deadline - Clock::now()).count();
  set_timeout(*client, &httplib::Client::set_connection_timeout, std::min(spec_.connect_timeout_s, remaining));
  set_timeout(*client, &httplib::Client::set_read_timeout, remaining);
  set_timeout(*client, &httplib::Client::set_write_timeout, remaining);
  return client;
}

void UpstreamCall::run() {
  bool reused = false;
  std::shared_ptr<httplib::Client> client = take_client(false, &reused);
  if (!client) {
    std::lock_guard lk(ex_->mu);
    finish(CallError::kCancelled, "cancelled before sending");
    return;
  }

  httplib::Request req;
  req.method = spec_.method;
  req.path = spec_.path;
  req.headers = spec_.headers;
  if (!spec_.body.empty() || spec_.method == "POST") {
    req.body = spec_.body;
    req.set_header("Content-Type", spec_.content_type);
  }
  req.response_handler = [this](const httplib::Response& r) {
    worker_->touch();
    std::lock_guard lk(ex_->mu);
    status_ = r.status;
    headers_ = r.headers;
    has_headers_ = true;
    ex_->cv.notify_all();
    return !cancelled_;
  };
  req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
    worker_->touch();
    std::unique_lock lk(ex_->mu);
    if (cancelled_ || Clock::now() > spec_.deadline) return false;
    if (spec_.drain) {
      if (queued_ < spec_.keep_bytes) {
        size_t take = std::min(n, spec_.keep_bytes - queued_);
        chunks_.emplace_back(data, take);
        queued_ += take;
      }
      return true;
    }
    while (queued_ >= spec_.max_queued_bytes && !cancelled_) {
      if (ex_->cv.wait_until(lk, spec_.deadline) == std::cv_status::timeout) return false;
    }
    if (cancelled_) return false;
    chunks_.emplace_back(data, n);
    queued_ += n;
    ex_->cv.notify_all();
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool ok = client->send(req, res, err);
  if (!ok && reused && should_resend(err)) {
    // The worker closes a kept-alive connection after a few idle seconds; when that races with
    // this call's write, the request dies on a pooled socket before any answer came. The worker
    // then never took the request (it closes idle connections only), so one resend on a new
    // connection is safe, also for a POST (the rule Go's HTTP client follows for idle closes).
    spdlog::info("request {}: {} worker {}: pooled connection closed under the request ({}); resending once on a new "
                 "connection",
                 spec_.request_id, role_name(worker_->role()), worker_->url(), httplib::to_string(err));
    worker_->call_resent();
    client = take_client(true, nullptr);
    if (client) {
      res = httplib::Response();
      err = httplib::Error::Success;
      ok = client->send(req, res, err);
    }
  }
  if (!client) {
    std::lock_guard lk(ex_->mu);
    finish(CallError::kCancelled, "cancelled before resending");
    return;
  }

  // Back to the pool before the call is marked finished: the client's next request (sent as
  // soon as it has this answer) then finds the connection idle instead of opening another.
  bool reusable = false;
  {
    std::lock_guard lk(ex_->mu);
    client_.reset();
    reusable = ok && !cancelled_;
  }
  worker_->conns().release(std::move(client), reusable);
  {
    std::lock_guard lk(ex_->mu);
    if (ok) {
      finish(CallError::kNone, "");
    } else if (cancelled_) {
      finish(CallError::kCancelled, "cancelled");
    } else if (err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout ||
               err == httplib::Error::BindIPAddress) {
      finish(CallError::kConnect, httplib::to_string(err));
    } else if (Clock::now() >= spec_.deadline) {
      finish(CallError::kTimeout, "no answer within the request timeout");
    } else {
      finish(CallError::kTransport, httplib::to_string(err));
    }
  }
}

// A write or read that failed before the worker's answer began, not cancelled, with time left.
bool UpstreamCall::should_resend(httplib::Error err) {
  if (err != httplib::Error::Write && err != httplib::Error::Read) return false;
  std::lock_guard lk(ex_->mu);
  return !cancelled_ && !has_headers_ && chunks_.empty() && Clock::now() < spec_.deadline;
}

// Called with ex_->mu held.
void UpstreamCall::finish(CallError e, std::string text) {
  finished_ = true;
  error_ = e;
  error_text_ = std::move(text);
  ex_->cv.notify_all();
  const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  const bool failed = e != CallError::kNone && e != CallError::kCancelled;
  worker_->call_finished(seconds, failed || status_ >= 500, e == CallError::kConnect);
  const char* role = role_name(worker_->role());
  if (failed) {
    spdlog::warn("request {}: {} worker {} {} {}: {} ({})", spec_.request_id, role, worker_->url(), spec_.method,
                 spec_.path, call_error_name(e), error_text_);
  } else if (e == CallError::kNone && (status_ >= 500 || (worker_->role() == WorkerRole::kPrefill && status_ >= 300))) {
    std::string excerpt;
    for (auto& c : chunks_) excerpt += c;
    if (excerpt.size() > 300) excerpt.resize(300);
    spdlog::warn("request {}: {} worker {} answered {}: {}", spec_.request_id, role, worker_->url(), status_, excerpt);
  }
}

}  // namespace pdserve::router
