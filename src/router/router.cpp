// Router lifecycle, routes, and the checks the router itself owns: body size, malformed
// JSON, auth, and the in-flight bound. Everything else is the workers' call.
#include "pdserve/router/router.h"

#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "http_util.h"
#include "pdserve/core/secret_file.h"
#include "pdserve/net/client_connection.h"
#include "pdserve/net/http_listener.h"
#include "pdserve/router/pd_body.h"
#include "router_impl.h"

namespace pdserve::router {

using HttpServer = net::HttpListener;

Status RouterImpl::init() {
  PDS_RETURN_IF_ERROR(validate(cfg_));
  if (cfg_.cluster_secret.empty() && !cfg_.cluster_secret_file.empty()) {
    auto secret = read_secret_file(cfg_.cluster_secret_file);
    if (!secret.is_ok()) return Status(secret.status().code(), "router: cluster_secret_file: " + secret.status().message());
    cfg_.cluster_secret = std::move(secret).value();
  }
  auto add = [&](const std::vector<std::string>& specs, WorkerRole role, Pool& pool) -> Status {
    for (const auto& s : specs) {
      PDS_ASSIGN_OR_RETURN(WorkerAddress a, parse_worker_address(s, role == WorkerRole::kPrefill));
      auto w = std::make_shared<Worker>(role, std::move(a), static_cast<size_t>(cfg_.max_idle_connections));
      pool.push_back(w);
      all_.push_back(w);
    }
    return Status::ok();
  };
  PDS_RETURN_IF_ERROR(add(cfg_.workers, WorkerRole::kUnified, workers_));
  PDS_RETURN_IF_ERROR(add(cfg_.prefill, WorkerRole::kPrefill, prefill_));
  PDS_RETURN_IF_ERROR(add(cfg_.decode, WorkerRole::kDecode, decode_));
  return Status::ok();
}

Status RouterImpl::start() {
  if (started_) return Status(ErrorCode::kInternal, "router: already started");
  auto server = std::make_unique<HttpServer>();
  HttpServer* raw = server.get();
  http_ = std::move(server);
  // Each connection holds a thread while a stream is relayed; leave room past the in-flight
  // bound so the 503 and /health still get a thread.
  const size_t max_threads = static_cast<size_t>(cfg_.max_in_flight) + 64;
  http_->new_task_queue = [max_threads] { return new TaskPool(max_threads); };
  http_->set_tcp_nodelay(true);
  http_->set_keep_alive_max_count(1000);
  http_->set_write_timeout(60, 0);  // a client that stops reading a stream for a minute is gone
  http_->set_payload_max_length(static_cast<size_t>(cfg_.max_body_bytes));
  install_routes();
  if (cfg_.port == 0) port_ = http_->bind_to_any_port(cfg_.host);
  else port_ = http_->bind_to_port(cfg_.host, cfg_.port) ? cfg_.port : -1;
  if (port_ <= 0) return Status(ErrorCode::kUnavailable, "router: cannot listen on " + cfg_.host + ":" + std::to_string(cfg_.port));
  raw->raise_backlog();
  health_ = std::make_unique<HealthChecker>(cfg_.health, all_);
  health_->start();
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs: wait for it, so a stop() right
  // after start() (a quick SIGTERM) can never leave the listener running and join() hanging.
  for (int i = 0; i < 1000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  started_ = true;
  spdlog::info("router: {} mode on {}:{}, {} worker(s)", cfg_.mode == RouterMode::kPd ? "PD" : "DP", cfg_.host, port_,
               all_.size());
  return Status::ok();
}

void RouterImpl::stop() {
  if (!started_ || stopping_.exchange(true)) return;
  health_->stop();
  http_->stop();
  calls_.close_and_cancel_all();  // wakes handlers and streams waiting on workers
  if (listener_.joinable()) listener_.join();
  pumps_.shutdown();
}

void RouterImpl::install_routes() {
  auto gen = [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    handle_generate(req, res, reader);
  };
  http_->Post("/v1/completions", gen);
  http_->Post("/v1/chat/completions", gen);
  http_->Post("/generate", gen);
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { handle_get_forward(req, res); });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) { handle_health(res); });
  http_->Get("/health_generate",
             [this](const httplib::Request& req, httplib::Response& res) { handle_health_generate(req, res); });
  http_->Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(server_info().dump(2), "application/json");
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  // httplib's own errors (no route, unparsable request line, 413 on Content-Length) come
  // without a body; give them an OpenAI-style one. Proxied answers carry X-Request-Id and
  // are left exactly as the worker sent them.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.has_header("X-Request-Id") || res.is_chunked_content_provider_)
      return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 404 ? "no route for " + req.method + " " + req.path
                                        : std::string("HTTP ") + std::to_string(res.status);
    set_error(res, res.status, msg, error_type_for(res.status), "");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    set_error(res, 500, "router internal error: " + what, "server_error", "");
  });
}

bool RouterImpl::authorized(const httplib::Request& req, httplib::Response& res) {
  if (cfg_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + cfg_.api_key) return true;
  bad_requests_total_++;
  set_error(res, 401, "missing or wrong API key (Authorization: Bearer ...)", "authentication_error", "invalid_api_key");
  return false;
}

ProxyRequest RouterImpl::make_request(const httplib::Request& req, httplib::Response& res) {
  ProxyRequest pr;
  pr.method = req.method;
  pr.path = req.path;
  std::string rid = req.get_header_value("X-Request-Id");
  pr.request_id = acceptable_request_id(rid) ? rid : new_request_id();
  pr.headers = forward_request_headers(req.headers);  // without the client's Authorization
  pr.headers.emplace("X-Request-Id", pr.request_id);
  if (!cfg_.worker_api_key.empty()) pr.headers.emplace("Authorization", "Bearer " + cfg_.worker_api_key);
  pr.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.request_timeout_s));
  // Found at the first check (100 ms in); httplib 0.11.4 hands the handler no socket.
  pr.client_gone = [&req, conn = std::optional<ClientConnection>()]() mutable {
    if (!conn) conn = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    return conn->gone();
  };
  res.set_header("X-Request-Id", pr.request_id);
  return pr;
}

void RouterImpl::handle_generate(const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
  requests_total_++;
  std::string body;
  bool too_big = false;
  const auto limit = static_cast<size_t>(cfg_.max_body_bytes);
  const bool read_ok = reader([&](const char* d, size_t n) {
    if (body.size() + n > limit) {  // chunked uploads: httplib only checks Content-Length
      too_big = true;
      return false;
    }
    body.append(d, n);
    return true;
  });
  if (too_big || res.status == 413) {
    bad_requests_total_++;
    set_error(res, 413, "request body exceeds the router's limit of " + std::to_string(limit) + " bytes",
              "invalid_request_error", "request_too_large");
    res.set_header("Connection", "close");
    return;
  }
  if (!read_ok) {
    bad_requests_total_++;
    set_error(res, 400, "could not read the request body", "invalid_request_error", "");
    return;
  }
  if (!authorized(req, res)) return;
  auto parsed = parse_json(body, "request body");
  if (!parsed.is_ok() || !parsed->is_object()) {
    bad_requests_total_++;
    set_error(res, 400, parsed.is_ok() ? "request body must be a JSON object" : parsed.status().message(),
              "invalid_request_error", "invalid_json");
    return;
  }
  // Admission last: a request refused for its own fault never takes a slot.
  const int64_t before = in_flight_.fetch_add(1);
  // Checked after counting ourselves in, so a drain that saw zero in flight never misses us.
  if (draining_.load()) {
    in_flight_--;
    rejected_total_++;
    set_error(res, 503, "router is draining: it is shutting down and takes no new requests", "overloaded_error",
              "router_draining");
    res.set_header("Connection", "close");
    return;
  }
  if (before >= cfg_.max_in_flight) {
    in_flight_--;
    rejected_total_++;
    set_error(res, 503,
              "router is at capacity: " + std::to_string(cfg_.max_in_flight) +
                  " requests in flight (max_in_flight); retry later",
              "overloaded_error", "router_overloaded");
    res.set_header("Retry-After", "1");
    return;
  }
  ProxyRequest pr = make_request(req, res);
  pr.token = std::make_shared<InFlightToken>(in_flight_);
  pr.body = std::move(body);
  if (cfg_.mode == RouterMode::kPd) {
    pr.json = std::move(parsed).value();
    proxy_pd(pr, res);
  } else {
    proxy_single(workers_, dp_policy_, pr, res);
  }
}

void RouterImpl::handle_get_forward(const httplib::Request& req, httplib::Response& res) {
  if (req.path.rfind("/v1/", 0) == 0 && !authorized(req, res)) return;
  ProxyRequest pr = make_request(req, res);
  // In PD mode decode is what the client talks to, so it answers /v1/models.
  proxy_single(cfg_.mode == RouterMode::kPd ? decode_ : workers_, aux_policy_, pr, res);
}

void RouterImpl::handle_health(httplib::Response& res) const {
  if (draining_.load()) {
    res.status = 503;
    res.set_content(Json{{"status", "draining"}, {"reason", "draining"}}.dump(), "application/json");
    return;
  }
  auto count = [](const Pool& p) {
    return std::count_if(p.begin(), p.end(), [](const auto& w) { return w->healthy(); });
  };
  std::string reason;
  if (cfg_.mode == RouterMode::kDp) {
    if (count(workers_) == 0) reason = "no healthy worker (0 of " + std::to_string(workers_.size()) + ")";
  } else if (count(prefill_) == 0) {
    reason = "no healthy prefill worker (0 of " + std::to_string(prefill_.size()) + ")";
  } else if (count(decode_) == 0) {
    reason = "no healthy decode worker (0 of " + std::to_string(decode_.size()) + ")";
  }
  Json j = {{"status", reason.empty() ? "ok" : "unhealthy"}, {"healthy_workers", count(all_)},
            {"workers", all_.size()}};
  if (!reason.empty()) j["reason"] = reason;
  res.status = reason.empty() ? 200 : 503;
  res.set_content(j.dump(), "application/json");
}

void RouterImpl::handle_health_generate(const httplib::Request& req, httplib::Response& res) {
  if (cfg_.mode == RouterMode::kDp) {
    ProxyRequest pr = make_request(req, res);
    proxy_single(workers_, aux_policy_, pr, res);
    return;
  }
  // PD: one prefill and one decode must both be able to generate.
  ProxyRequest pr = make_request(req, res);
  auto p = pick(prefill_, aux_policy_, {});
  auto d = pick(decode_, aux_policy_, {});
  if (!p || !d) {
    set_error(res, 503, std::string("no healthy ") + (!p ? "prefill" : "decode") + " worker", "overloaded_error",
              "no_healthy_worker");
    return;
  }
  auto ex = std::make_shared<Exchange>();
  auto pc = call(p, pr, "", true, ex);
  auto dc = call(d, pr, "", false, ex);
  {
    std::unique_lock lk(ex->mu);
    ex->cv.wait_until(lk, pr.deadline, [&] { return pc->finished_locked() && dc->finished_locked(); });
    if (pc->finished_locked() && pc->failed_locked()) {
      const std::string why = pc->error_locked() != CallError::kNone ? call_error_name(pc->error_locked())
                                                                      : "HTTP " + std::to_string(pc->status_locked());
      lk.unlock();
      dc->cancel();
      set_error(res, 503, "prefill worker " + p->url() + " /health_generate failed: " + why, "server_error", "prefill_failed");
      return;
    }
  }
  relay(dc, nullptr, pr, res);
}

// --- public facade ---

Router::Router(std::unique_ptr<RouterImpl> impl) : impl_(std::move(impl)) {}
Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::create(RouterConfig cfg) {
  auto impl = std::make_unique<RouterImpl>(std::move(cfg));
  PDS_RETURN_IF_ERROR(impl->init());
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Status Router::start() { return impl_->start(); }
void Router::begin_drain() { impl_->begin_drain(); }
int64_t Router::in_flight() const { return impl_->in_flight(); }
int Router::port() const { return impl_->port(); }
void Router::stop() { impl_->stop(); }
const RouterConfig& Router::config() const { return impl_->config(); }
Json Router::server_info() const { return impl_->server_info(); }
std::string Router::metrics_text() const { return impl_->metrics_text(); }

}  // namespace pdserve::router
