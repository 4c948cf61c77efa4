// `pdserve router`: an HTTP load balancer in front of pdserve workers.
// DP mode spreads requests over unified replicas; PD mode sends each request to a prefill and
// a decode server at once (with bootstrap host/port/room added) and relays decode's answer.
// See docs/router.md for the request flow and the failure rules.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"
#include "pdserve/router/config.h"

namespace pdserve::router {

class RouterImpl;

class Router {
 public:
  // Validates the config and resolves worker URLs; nothing is started yet.
  static Result<std::unique_ptr<Router>> create(RouterConfig cfg);
  ~Router();  // stops if running

  // Binds host:port (port 0: any free port), then serves and health-checks on background
  // threads. Returns once the socket is listening.
  Status start();
  int port() const;
  // Stops accepting, cancels in-flight upstream calls, joins every thread. Idempotent.
  void stop();
  // Graceful shutdown: new requests and /health get 503 "draining"; in_flight() counts client
  // requests whose response is not fully written yet. stop() afterwards cancels what is left.
  void begin_drain();
  int64_t in_flight() const;

  const RouterConfig& config() const;
  Json server_info() const;        // what GET /get_server_info returns
  std::string metrics_text() const;  // what GET /metrics returns

 private:
  explicit Router(std::unique_ptr<RouterImpl> impl);
  std::unique_ptr<RouterImpl> impl_;
};

}  // namespace pdserve::router
