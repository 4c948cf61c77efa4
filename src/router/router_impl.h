// The router's internals: routes and admission (router.cpp), the proxy flows (proxy.cpp),
// info and metrics (router_info.cpp).
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "health.h"
#include "pdserve/router/config.h"
#include "pdserve/router/policy.h"
#include "task_pool.h"
#include "upstream.h"
#include "worker.h"

namespace pdserve::router {

// Held while a client request counts against max_in_flight; released when the last byte of
// the response has been written (a stream keeps it alive in its content provider).
class InFlightToken {
 public:
  explicit InFlightToken(std::atomic<int64_t>& n) : n_(n) {}
  ~InFlightToken() { n_.fetch_sub(1, std::memory_order_relaxed); }
  InFlightToken(const InFlightToken&) = delete;
  InFlightToken& operator=(const InFlightToken&) = delete;

 private:
  std::atomic<int64_t>& n_;
};

// One client request, as the proxy flows need it.
struct ProxyRequest {
  std::string method = "POST";
  std::string path;
  std::string body;  // the client's bytes, forwarded unchanged in DP mode
  Json json;         // parsed body (PD mode adds the bootstrap fields to it)
  httplib::Headers headers;  // what the workers see, X-Request-Id included
  std::string request_id;
  Clock::time_point deadline;
  std::shared_ptr<InFlightToken> token;
  // True once the client hung up (checked while the router waits for a worker's answer).
  std::function<bool()> client_gone = [] { return false; };
};

class RouterImpl {
 public:
  explicit RouterImpl(RouterConfig cfg)
      : cfg_(std::move(cfg)),
        dp_policy_(cfg_.dp_policy),
        prefill_policy_(cfg_.prefill_policy),
        decode_policy_(cfg_.decode_policy),
        aux_policy_(PolicyKind::kRoundRobin),
        pumps_(SIZE_MAX) {}
  ~RouterImpl() { stop(); }

  Status init();
  Status start();
  void stop();
  int port() const { return port_; }
  void begin_drain() { draining_.store(true); }
  int64_t in_flight() const { return in_flight_.load(); }
  const RouterConfig& config() const { return cfg_; }
  Json server_info() const;
  std::string metrics_text() const;

 private:
  using Pool = std::vector<std::shared_ptr<Worker>>;

  // router.cpp
  void install_routes();
  void handle_generate(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader);
  void handle_get_forward(const httplib::Request& req, httplib::Response& res);
  void handle_health(httplib::Response& res) const;
  void handle_health_generate(const httplib::Request& req, httplib::Response& res);
  bool authorized(const httplib::Request& req, httplib::Response& res);
  ProxyRequest make_request(const httplib::Request& req, httplib::Response& res);

  // proxy.cpp
  std::shared_ptr<Worker> pick(const Pool& pool, Policy& policy, const std::vector<Worker*>& exclude);
  CallSpec spec_for(const ProxyRequest& pr, std::string body, bool drain) const;
  std::shared_ptr<UpstreamCall> call(const std::shared_ptr<Worker>& w, const ProxyRequest& pr, std::string body,
                                     bool drain, std::shared_ptr<Exchange> ex);
  // One worker from `pool`; connect failures retried on others.
  void proxy_single(const Pool& pool, Policy& policy, ProxyRequest& pr, httplib::Response& res);
  void proxy_pd(ProxyRequest& pr, httplib::Response& res);
  // Sends `main`'s answer to the client: buffered JSON, or an SSE relay. In PD, `prefill` is
  // watched so its failure ends the request cleanly while decode has sent nothing yet.
  void relay(std::shared_ptr<UpstreamCall> main, std::shared_ptr<UpstreamCall> prefill, ProxyRequest& pr,
             httplib::Response& res);
  void fail_for_prefill(UpstreamCall& prefill, httplib::Response& res, const ProxyRequest& pr);

  // prefill_abort.cpp: posts /abort for `room` to the prefill's bootstrap server, in the background.
  void abort_prefill_room(const Worker& prefill, uint64_t room, const std::string& why);

  RouterConfig cfg_;
  Pool workers_, prefill_, decode_, all_;
  Policy dp_policy_, prefill_policy_, decode_policy_;
  Policy aux_policy_;  // /v1/models and /health_generate
  std::unique_ptr<HealthChecker> health_;
  TaskPool pumps_;  // one pump per live upstream call; bounded by max_in_flight in practice
  CallRegistry calls_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  int port_ = 0;
  bool started_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};

  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> requests_total_{0}, rejected_total_{0}, retries_total_{0}, bad_requests_total_{0},
      no_worker_total_{0}, prefill_failures_total_{0},
      prefill_aborts_total_{0}, client_gone_total_{0};
};

}  // namespace pdserve::router
