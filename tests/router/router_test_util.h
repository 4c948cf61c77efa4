// Helpers shared by the router tests: start a router on a free port with fast health checks,
// and talk to it (JSON and incremental SSE).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "fake_worker.h"
#include "pdserve/router/router.h"

namespace pdserve::router::testing {

inline RouterConfig fast_config() {
  RouterConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  c.health.interval_s = 0.05;
  c.health.timeout_s = 1;
  c.health.failure_threshold = 2;
  c.health.success_threshold = 2;
  c.request_timeout_s = 60;
  return c;
}

inline std::unique_ptr<Router> start_router(RouterConfig c) {
  auto r = Router::create(std::move(c));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return nullptr;
  auto router = std::move(r).value();
  Status st = router->start();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return router;
}

inline httplib::Result post(int port, const std::string& path, const std::string& body,
                            const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  return cli.Post(path.c_str(), headers, body, "application/json");
}

inline httplib::Result get(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  return cli.Get(path.c_str());
}

// POST and hand each body chunk to on_chunk as it arrives. Returns the status (or -1).
inline int post_stream(int port, const std::string& path, const std::string& body,
                       const std::function<void(const std::string&)>& on_chunk, httplib::Headers* resp_headers = nullptr,
                       const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  int status = -1;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    if (resp_headers) *resp_headers = r.headers;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    on_chunk(std::string(d, n));
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (!cli.send(req, res, err)) return -1;
  return status;
}

// Polls `cond` until true or ~20 s pass (a safety net, not a timing assertion).
inline bool eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 2000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

inline Json worker_info(Router& r, const std::string& url) {
  const Json info = r.server_info();  // keep the temporary alive across the loop
  for (const auto& w : info["workers"])
    if (w["url"] == url) return w;
  return Json();
}

}  // namespace pdserve::router::testing
