// The request flows: pick a worker (or a prefill/decode pair), call it, retry a connect
// failure elsewhere, then relay the answer. Nothing reaches the client before a worker has
// answered, which is what makes the retries safe.
#include <spdlog/spdlog.h>

#include "http_util.h"
#include "pdserve/router/pd_body.h"
#include "router_impl.h"

namespace pdserve::router {

std::shared_ptr<Worker> RouterImpl::pick(const Pool& pool, Policy& policy, const std::vector<Worker*>& exclude) {
  std::vector<std::shared_ptr<Worker>> usable;
  std::vector<int64_t> outstanding;
  for (const auto& w : pool) {
    if (!w->healthy() || std::find(exclude.begin(), exclude.end(), w.get()) != exclude.end()) continue;
    usable.push_back(w);
    outstanding.push_back(w->outstanding());
  }
  if (usable.empty()) return nullptr;
  return usable[policy.pick(outstanding)];
}

CallSpec RouterImpl::spec_for(const ProxyRequest& pr, std::string body, bool drain) const {
  CallSpec s;
  s.method = pr.method;
  s.path = pr.path;
  s.headers = pr.headers;
  s.body = std::move(body);
  s.deadline = pr.deadline;
  s.connect_timeout_s = cfg_.connect_timeout_s;
  s.drain = drain;
  s.request_id = pr.request_id;
  return s;
}

std::shared_ptr<UpstreamCall> RouterImpl::call(const std::shared_ptr<Worker>& w, const ProxyRequest& pr,
                                               std::string body, bool drain, std::shared_ptr<Exchange> ex) {
  return UpstreamCall::start(std::move(ex), w, spec_for(pr, std::move(body), drain), pumps_, calls_);
}

namespace {

std::string tried_list(const std::vector<Worker*>& ws) {
  std::string s;
  for (auto* w : ws) s += (s.empty() ? "" : ", ") + w->url();
  return s;
}

void set_call_error(httplib::Response& res, UpstreamCall& c) {  // ex mu held
  const std::string what = std::string(role_name(c.worker().role())) + " worker " + c.worker().url() + ": " +
                           call_error_name(c.error_locked()) + " (" + c.error_text_locked() + ")";
  if (c.error_locked() == CallError::kTimeout) set_error(res, 504, what, "timeout_error", "upstream_timeout");
  else set_error(res, 502, what, "server_error", "upstream_error");
}

}  // namespace

// Waits for `ready` under lk until the deadline, checking every 100 ms whether the client
// hung up. A client that left gets nothing more: the caller cancels the worker calls, whose
// closed sockets tell the workers to abort (they watch their clients the same way).
enum class WaitEnd { kReady, kDeadline, kClientGone };
template <class Pred>
WaitEnd wait_for_answer(Exchange& ex, std::unique_lock<std::mutex>& lk, const ProxyRequest& pr, Pred ready) {
  for (;;) {
    const auto until = std::min(pr.deadline, Clock::now() + std::chrono::milliseconds(100));
    if (ex.cv.wait_until(lk, until, ready)) return WaitEnd::kReady;
    if (Clock::now() >= pr.deadline) return WaitEnd::kDeadline;
    lk.unlock();
    const bool gone = pr.client_gone();
    lk.lock();
    if (gone && !ready()) return WaitEnd::kClientGone;
  }
}

void RouterImpl::proxy_single(const Pool& pool, Policy& policy, ProxyRequest& pr, httplib::Response& res) {
  std::vector<Worker*> failed;
  for (int attempt = 0;; ++attempt) {
    auto w = pick(pool, policy, failed);
    if (!w) {
      no_worker_total_++;
      if (failed.empty()) set_error(res, 503, "no healthy worker to serve the request", "overloaded_error", "no_healthy_worker");
      else set_error(res, 502, "could not connect to any worker (tried " + tried_list(failed) + ")", "server_error", "upstream_connect_failed");
      return;
    }
    auto ex = std::make_shared<Exchange>();
    auto c = call(w, pr, pr.body, false, ex);
    {
      std::unique_lock lk(ex->mu);
      if (wait_for_answer(*ex, lk, pr, [&] { return c->has_headers_locked() || c->finished_locked(); }) == WaitEnd::kClientGone) {
        lk.unlock();
        c->cancel();
        client_gone_total_++;
        return;
      }
      const bool connect_failed = c->finished_locked() && c->error_locked() == CallError::kConnect;
      if (connect_failed && attempt < cfg_.max_connect_retries) {
        failed.push_back(w.get());
        retries_total_++;
        continue;
      }
    }
    relay(c, nullptr, pr, res);
    return;
  }
}

void RouterImpl::fail_for_prefill(UpstreamCall& p, httplib::Response& res, const ProxyRequest& pr) {
  // ex mu held. A prefill 4xx is the worker judging the request: pass it on unchanged.
  prefill_failures_total_++;
  if (p.error_locked() == CallError::kNone && p.status_locked() >= 400 && p.status_locked() < 500) {
    res.status = p.status_locked();
    auto ct = p.headers_locked().find("Content-Type");
    res.set_content(p.take_body_locked(), ct == p.headers_locked().end() ? "application/json" : ct->second);
    return;
  }
  std::string why = p.error_locked() != CallError::kNone
                        ? std::string(call_error_name(p.error_locked())) + " (" + p.error_text_locked() + ")"
                        : "answered HTTP " + std::to_string(p.status_locked());
  if (p.error_locked() == CallError::kNone) {
    // The worker's own reason (e.g. "this instance lost one of its nodes ..."), when it gave one.
    Json b = Json::parse(p.take_body_locked(), nullptr, /*allow_exceptions=*/false);
    if (b.is_object() && b.contains("error") && b["error"].is_object() && b["error"].contains("message") && b["error"]["message"].is_string())
      why += ": " + b["error"]["message"].get<std::string>();
  }
  spdlog::warn("request {}: failing it because prefill worker {} {}", pr.request_id, p.worker().url(), why);
  set_error(res, 502, "prefill worker " + p.worker().url() + " failed: " + why, "server_error", "prefill_failed");
}

void RouterImpl::proxy_pd(ProxyRequest& pr, httplib::Response& res) {
  std::vector<Worker*> bad_p, bad_d;
  for (int attempt = 0;; ++attempt) {
    auto p = pick(prefill_, prefill_policy_, bad_p);
    auto d = pick(decode_, decode_policy_, bad_d);
    if (!p || !d) {
      no_worker_total_++;
      std::vector<Worker*> tried = bad_p;
      tried.insert(tried.end(), bad_d.begin(), bad_d.end());
      std::string msg = std::string("no healthy ") + (!p ? "prefill" : "decode") + " worker";
      if (!tried.empty()) msg += " (connect failed: " + tried_list(tried) + ")";
      set_error(res, tried.empty() ? 503 : 502, msg, tried.empty() ? "overloaded_error" : "server_error",
                "no_healthy_worker");
      return;
    }
    // Both sides get the same bytes; decode learns where to fetch the KV from the bootstrap fields.
    Json body = pr.json;
    const uint64_t room = new_bootstrap_room();
    add_bootstrap_fields(body, p->addr().host, p->addr().bootstrap_port, room);
    std::string text = body.dump();
    auto ex = std::make_shared<Exchange>();
    auto pc = call(p, pr, text, /*drain=*/true, ex);
    auto dc = call(d, pr, std::move(text), /*drain=*/false, ex);

    std::unique_lock lk(ex->mu);
    const WaitEnd end = wait_for_answer(*ex, lk, pr, [&] {
      return dc->has_headers_locked() || dc->finished_locked() || pc->failed_locked();
    });
    if (end == WaitEnd::kClientGone) {
      lk.unlock();
      pc->cancel();
      dc->cancel();
      client_gone_total_++;
      return;
    }
    if (end == WaitEnd::kDeadline) {
      lk.unlock();
      pc->cancel();
      dc->cancel();
      abort_prefill_room(*p, room, "decode worker " + d->url() + " did not answer within the request timeout");
      set_error(res, 504, "no answer from decode worker " + d->url() + " within the request timeout", "timeout_error",
                "upstream_timeout");
      return;
    }
    const bool d_conn = dc->finished_locked() && dc->error_locked() == CallError::kConnect;
    const bool p_conn = pc->finished_locked() && pc->error_locked() == CallError::kConnect;
    // Nobody else can tell prefill: decode never saw this room.
    if (d_conn && !p_conn) abort_prefill_room(*p, room, "decode worker " + d->url() + " is unreachable");
    if ((d_conn || p_conn) && attempt < cfg_.max_connect_retries) {
      // A fresh pair and room: the other side may already have started on this one.
      if (d_conn) bad_d.push_back(d.get());
      if (p_conn) bad_p.push_back(p.get());
      lk.unlock();
      pc->cancel();
      dc->cancel();
      retries_total_++;
      continue;
    }
    // Decode refused with 503 before any byte reached the client (its pair check could not
    // reach prefill, the KV transfer failed, it is overloaded): a fresh pair may succeed.
    if (dc->has_headers_locked() && dc->status_locked() == 503 && attempt < cfg_.max_connect_retries) {
      // Not excluded: with one pair the retry is the same pair with a fresh room.
      spdlog::warn("request {}: decode worker {} answered 503 before the first token; retrying with a fresh room",
                   pr.request_id, d->url());
      lk.unlock();
      pc->cancel();
      dc->cancel();
      retries_total_++;
      continue;
    }
    if (!dc->has_headers_locked() && pc->failed_locked()) {
      fail_for_prefill(*pc, res, pr);
      lk.unlock();
      dc->cancel();
      return;
    }
    lk.unlock();
    relay(dc, pc, pr, res);
    return;
  }
}

namespace {

// State shared between a streaming response's content provider and its releaser.
struct StreamRelay {
  std::shared_ptr<UpstreamCall> main, prefill;
  std::shared_ptr<InFlightToken> token;
  Clock::time_point deadline;
  const std::atomic<bool>* stopping = nullptr;
  bool sent_any = false;
  bool at_event_boundary = true;  // last byte sent ended an SSE event ("\n\n")
};

std::string sse_error(const StreamRelay& s, const std::string& message, const std::string& code) {
  Json e = {{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", code}}}};
  return std::string(s.at_event_boundary ? "" : "\n\n") + "data: " + e.dump() + "\n\ndata: [DONE]\n\n";
}

// One provider call: write what has arrived, or end the stream. Returns false to abort.
bool pump_stream(StreamRelay& s, httplib::DataSink& sink) {
  Exchange& ex = s.main->exchange();
  std::unique_lock lk(ex.mu);
  for (;;) {
    if (s.main->has_chunk_locked()) {
      std::string out;
      while (s.main->has_chunk_locked()) out += s.main->pop_chunk_locked();
      lk.unlock();
      s.sent_any = true;
      s.at_event_boundary = out.size() >= 2 && out.compare(out.size() - 2, 2, "\n\n") == 0;
      return sink.write(out.data(), out.size());
    }
    if (s.main->finished_locked()) {
      const CallError e = s.main->error_locked();
      std::string tail;
      if (e != CallError::kNone && e != CallError::kCancelled)
        tail = sse_error(s, "decode stream from " + s.main->worker().url() + " broke: " + call_error_name(e),
                         "upstream_error");
      lk.unlock();
      if (!tail.empty() && !sink.write(tail.data(), tail.size())) return false;
      sink.done();
      return true;
    }
    if (s.prefill && !s.sent_any && s.prefill->failed_locked()) {
      // Decode sent headers but no token yet, and prefill is gone: it will never get the KV.
      std::string why = s.prefill->error_locked() != CallError::kNone
                            ? call_error_name(s.prefill->error_locked())
                            : "HTTP " + std::to_string(s.prefill->status_locked());
      std::string tail = sse_error(s, "prefill worker " + s.prefill->worker().url() + " failed: " + why, "prefill_failed");
      lk.unlock();
      s.main->cancel();
      const bool ok = sink.write(tail.data(), tail.size());
      if (ok) sink.done();
      return ok;
    }
    if (s.stopping->load() || Clock::now() >= s.deadline) {
      lk.unlock();
      s.main->cancel();
      return false;
    }
    // Bounded wait so router shutdown is noticed even if the worker stays silent.
    ex.cv.wait_for(lk, std::chrono::milliseconds(200));
  }
}

}  // namespace

void RouterImpl::relay(std::shared_ptr<UpstreamCall> main, std::shared_ptr<UpstreamCall> prefill, ProxyRequest& pr,
                       httplib::Response& res) {
  Exchange& ex = main->exchange();
  std::unique_lock lk(ex.mu);
  if (!main->has_headers_locked()) {
    if (main->finished_locked()) set_call_error(res, *main);
    else set_error(res, 504, main->worker().url() + " did not answer within the request timeout", "timeout_error", "upstream_timeout");
    lk.unlock();
    main->cancel();
    if (prefill) prefill->cancel();
    return;
  }
  const int status = main->status_locked();
  const bool ok_status = status >= 200 && status < 300;
  copy_response_headers(main->headers_locked(), res);
  auto ct_it = main->headers_locked().find("Content-Type");
  const std::string content_type = ct_it == main->headers_locked().end() ? "" : ct_it->second;

  if (ok_status && is_event_stream(main->headers_locked())) {
    res.status = status;
    auto s = std::make_shared<StreamRelay>();
    s->main = main;
    s->prefill = prefill;
    s->token = pr.token;
    s->deadline = pr.deadline;
    s->stopping = &stopping_;
    lk.unlock();
    res.set_chunked_content_provider(
        content_type, [s](size_t, httplib::DataSink& sink) { return pump_stream(*s, sink); },
        [s](bool success) {
          if (success) return;
          // The client went away (or we aborted): stop the workers' work on it.
          s->main->cancel();
          if (s->prefill) s->prefill->cancel();
        });
    return;
  }

  // Buffered: a JSON answer or an error body. Small, and buffering lets a failure become a
  // clean error instead of a truncated body.
  if (wait_for_answer(ex, lk, pr, [&] { return main->finished_locked() || (prefill && ok_status && prefill->failed_locked()); }) ==
      WaitEnd::kClientGone) {
    lk.unlock();
    main->cancel();
    if (prefill) prefill->cancel();
    client_gone_total_++;
    return;
  }
  if (!main->finished_locked() && prefill && prefill->failed_locked()) {
    fail_for_prefill(*prefill, res, pr);
    lk.unlock();
    main->cancel();
    return;
  }
  if (!main->finished_locked() || main->error_locked() != CallError::kNone) {
    if (main->finished_locked()) set_call_error(res, *main);
    else set_error(res, 504, main->worker().url() + " did not finish within the request timeout", "timeout_error", "upstream_timeout");
    lk.unlock();
    main->cancel();
    if (prefill) prefill->cancel();
    return;
  }
  res.status = status;
  res.set_content(main->take_body_locked(), content_type.empty() ? "application/octet-stream" : content_type);
  lk.unlock();
  // Decode refused the request: prefill's work is useless now.
  if (prefill && !ok_status) prefill->cancel();
}

}  // namespace pdserve::router
