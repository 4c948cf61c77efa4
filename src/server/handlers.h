// Route handlers, kept apart from the server's wiring (http_server.cpp).
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>

#include "pdserve/disagg/decode_coordinator.h"
#include "pdserve/disagg/prefill_coordinator.h"
#include "pdserve/runtime/engine.h"
#include "pdserve/server/api_error.h"
#include "pdserve/server/openai_request.h"
#include "pdserve/server/serve_config.h"

namespace pdserve::server {

// Shared by the routes and HttpServer: whether we drain, and how many generation requests
// are still being answered (a token lives until the last byte of a response is written).
struct DrainState {
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};
  std::shared_ptr<void> enter() {
    in_flight.fetch_add(1);
    return std::shared_ptr<void>(nullptr, [this](void*) { in_flight.fetch_sub(1); });
  }
};
ApiError draining_error();

struct HandlerContext {
  const ServeConfig& cfg;
  runtime::Engine& engine;
  const tokenizer::Tokenizer& tok;
  disagg::PrefillCoordinator* prefill = nullptr;  // set in the prefill role
  disagg::DecodeCoordinator* decode = nullptr;    // set in the decode role
  DrainState* drain = nullptr;
};

void send_error(httplib::Response& res, const ApiError& e);
void send_json(httplib::Response& res, const Json& j, int status = 200);

// POST /v1/completions and /v1/chat/completions.
void handle_generate(const HandlerContext& ctx, ApiKind kind, const httplib::Request& req, httplib::Response& res);
// GET /health_generate: one real greedy token through the whole engine.
void handle_health_generate(const HandlerContext& ctx, httplib::Response& res);
// GET /metrics (Prometheus text exposition format).
std::string render_metrics(const runtime::EngineStats& stats, const runtime::MetricsSnapshot& m);
// The transfer metrics of a prefill or decode server.
std::string render_pd_metrics(const std::string& role, const disagg::PdMetricsSnapshot& m);

}  // namespace pdserve::server
