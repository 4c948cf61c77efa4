// Wiring: model + tokenizer + engine, routes, auth, body limit, error pages.
#include "pdserve/server/http_server.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <spdlog/spdlog.h>

#include "cuda_options.h"
#include "handlers.h"
#include "pdserve/server/node_serving.h"
#include "pdserve/core/secret_file.h"
#include "pdserve/transfer/tcp_transport.h"
#include "transport_choice.h"

namespace pdserve::server {

static bool carries_body(const httplib::Request& req) {
  if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos) return true;
  const std::string n = req.get_header_value("Content-Length");
  return !n.empty() && n != "0";
}

// A draining decode refuses before parsing the request; its prefill half must still hear of
// it (or it waits out the bootstrap timeout on a target that never comes).
void refuse_room(disagg::DecodeCoordinator& decode, const std::string& body, const std::string& why) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("bootstrap_host") || !j["bootstrap_host"].is_string() ||
      !j.contains("bootstrap_port") || !j["bootstrap_port"].is_number_integer() || !j.contains("bootstrap_room") ||
      !j["bootstrap_room"].is_number_unsigned())
    return;
  const int64_t port = j["bootstrap_port"].get<int64_t>();
  if (port < 1 || port > 65535) return;
  decode.refuse(j["bootstrap_host"].get<std::string>(), static_cast<int>(port), j["bootstrap_room"].get<uint64_t>(), why);
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(ServeConfig cfg, TransportFactory make_transport, DeviceFactory make_device,
                                                      RdmaHooks rdma) {
  PDS_RETURN_IF_ERROR(cfg.validate());
  if (cfg.served_model_name.empty())
    cfg.served_model_name = std::filesystem::path(cfg.model_dir).lexically_normal().filename().string();
  if (cfg.served_model_name.empty()) cfg.served_model_name = "pdserve";
  if (cfg.nnodes > 1 && cfg.node_rank != 0)
    return invalid_argument("--node-rank " + std::to_string(cfg.node_rank) + ": only node 0 serves HTTP (the others follow it: run_node_follower)");
  // Not with a test's device factory: it decides itself where its forward runs.
  // Before loading any weights: this node's GPUs (its ranks, or with --pp its stages).
  if (cfg.device == "cuda" && !make_device) PDS_RETURN_IF_ERROR(check_cuda_devices(node_share(cfg).ranks, node_share(cfg).stages));
  std::unique_ptr<NodeLeader> nodes;
  std::unique_ptr<TpModelGroup> group;
  if (cfg.nnodes > 1) {
    // This node's ranks of a group over several nodes (node_serving.h); node 0 serves HTTP.
    if (make_device) return unsupported("--nnodes > 1 with a test's device factory");
    PDS_ASSIGN_OR_RETURN(nodes, NodeLeader::join(cfg, &group));
  } else {
    PDS_ASSIGN_OR_RETURN(group, TpModelGroup::load_models(cfg.model_dir, cfg.tp, cfg.pp));
  }
  PDS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::load(cfg.model_dir));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->tok_ = std::make_shared<const tokenizer::Tokenizer>(std::move(tok));
  PDS_ASSIGN_OR_RETURN(s->engine_, runtime::Engine::create(cfg.runtime, std::move(group), s->tok_));
  cfg.runtime = s->engine_->config();  // resolved values, for /get_server_info
  if (nodes) {
    PDS_RETURN_IF_ERROR(nodes->start(s->engine_->group(), cfg));  // joins the GPUs too with --device cuda
    s->nodes_ = std::move(nodes);
  } else if (cfg.device == "cuda") {
    // Device pools of the geometry the engine gave the host pools (which keep the accounting).
    TpModelGroup& g = s->engine_->group();
    // The roles keep their transfer on the host pools; the engine copies each request's cache
    // between them and the device at the hand-over points (device_forward.h), rank by rank.
    if (make_device) {
      PDS_ASSIGN_OR_RETURN(std::unique_ptr<DeviceForward> dev, make_device(g, cfg));
      spdlog::info("device: {}", dev->describe());
      PDS_RETURN_IF_ERROR(g.set_device_forward(std::move(dev)));
    } else if (g.pp() > 1) {
      // One GPU per stage, each holding only its layers (validate() keeps --tp 1 here).
      std::vector<std::shared_ptr<const Model>> stages;
      for (int st = 0; st < g.pp(); ++st) stages.push_back(g.stage_model_ptr(st, 0));
      PDS_ASSIGN_OR_RETURN(auto devs, make_cuda_pp_forwards(stages, g.kv(0).num_pages(), g.kv(0).page_size(), g.state(0).num_slots(),
                                                            cuda_forward_options(cfg, g.kv(0).pages_for_tokens(cfg.runtime.max_model_len))));
      for (const auto& d : devs) spdlog::info("device: {}", d->describe());
      PDS_RETURN_IF_ERROR(g.set_device_forwards(std::move(devs)));
    } else {
      std::vector<std::shared_ptr<const Model>> shards;
      for (int r = 0; r < g.size(); ++r) shards.push_back(g.model_ptr(r));
      PDS_ASSIGN_OR_RETURN(auto devs, make_cuda_tp_forwards(shards, g.kv(0).num_pages(), g.kv(0).page_size(), g.state(0).num_slots(),
                                                            cuda_forward_options(cfg, g.kv(0).pages_for_tokens(cfg.runtime.max_model_len))));
      for (const auto& d : devs) spdlog::info("device: {}", d->describe());
      PDS_RETURN_IF_ERROR(g.set_device_forwards(std::move(devs)));
    }
  }
  if (cfg.role != ServerRole::kUnified) {
    PDS_ASSIGN_OR_RETURN(TransportChoice choice, choose_transport(cfg.disagg, rdma));
    s->transport_choice_ = choice.reason;
    s->transport_rdma_ = std::move(choice.rdma);
    spdlog::info("transfer backend: {}", s->transport_choice_);
    if (!cfg.disagg.cluster_secret_file.empty()) {
      PDS_ASSIGN_OR_RETURN(cfg.disagg.cluster_secret, read_secret_file(cfg.disagg.cluster_secret_file));
    }
    transfer::TcpConfig tcp;
    tcp.secret = cfg.disagg.cluster_secret;
    tcp.listen_host = cfg.disagg.transfer_host;
    tcp.listen_port = static_cast<uint16_t>(cfg.role == ServerRole::kDecode ? cfg.disagg.transfer_port : 0);
    tcp.streams_per_peer = cfg.disagg.transfer_streams;
    PDS_ASSIGN_OR_RETURN(auto transport, make_role_transport(choice, cfg.disagg, tcp, make_transport, rdma));
    if (cfg.role == ServerRole::kPrefill) {
      PDS_ASSIGN_OR_RETURN(s->prefill_, disagg::PrefillCoordinator::create(cfg.disagg, *s->engine_, std::move(transport), cfg.model_dir));
      cfg.disagg.bootstrap_port = s->prefill_->bootstrap_port();
    } else {
      PDS_ASSIGN_OR_RETURN(s->decode_, disagg::DecodeCoordinator::create(cfg.disagg, *s->engine_, std::move(transport), cfg.model_dir));
    }
  }
  s->cfg_ = std::move(cfg);
  s->engine_->start();
  s->http_ = std::make_unique<net::HttpListener>();
  s->drain_ = std::make_shared<DrainState>();
  s->install_routes();
  return s;
}

HttpServer::~HttpServer() {
  stop();
  // Engine first: it posts a final event to every open handle, so streaming handlers end,
  // and releases every room through the coordinators' hooks (they outlive it by a line).
  if (engine_) engine_->stop();
  if (nodes_) nodes_->shutdown("the leader is stopping");  // the followers exit 0
  prefill_.reset();
  decode_.reset();
  http_.reset();
}

Result<int> HttpServer::bind() {
  ::signal(SIGPIPE, SIG_IGN);  // a client that vanished must not kill the server on write
  const int port = cfg_.port == 0 ? http_->bind_to_any_port(cfg_.host) : (http_->bind_to_port(cfg_.host, cfg_.port) ? cfg_.port : -1);
  if (port <= 0) return io_error("cannot bind " + cfg_.host + ":" + std::to_string(cfg_.port));
  http_->raise_backlog();
  cfg_.port = port;
  return port;
}

// A stop() that lands between bind() and the listen loop starting (a SIGTERM right after
// "listening" was printed) must still stop the server: httplib's stop() does nothing until
// its loop runs, so run() checks the flag first and stop() waits for a loop that is starting.
void HttpServer::run() {
  run_called_.store(true);
  if (!stop_requested_.load()) http_->listen_after_bind();
  run_returned_.store(true);
}

void HttpServer::stop() {
  stop_requested_.store(true);
  if (!http_) return;
  for (int i = 0; i < 400 && run_called_.load() && !run_returned_.load() && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  http_->stop();
}

void HttpServer::begin_drain() { drain_->draining.store(true); }
bool HttpServer::draining() const { return drain_->draining.load(); }
int64_t HttpServer::in_flight() const { return drain_->in_flight.load(); }
void HttpServer::abort_all() {
  if (engine_) engine_->stop();
  if (prefill_) prefill_->stop();  // wakes requests still waiting for decode's target
}

bool HttpServer::refused(const httplib::Request& req, httplib::Response& res) {
  const bool work = req.path.rfind("/v1/", 0) == 0 || req.path == "/health_generate";
  if (drain_->draining.load() && work) {
    if (decode_) refuse_room(*decode_, req.body, "it is draining");
    send_error(res, draining_error());
    return true;
  }
  if (nodes_ && work) {
    // An instance that lost a node refuses new work with the reason (node_serving.h).
    if (Status lost = engine_->group().health(); !lost.is_ok()) {
      if (decode_) refuse_room(*decode_, req.body, lost.message());  // its prefill half frees the room now
      send_error(res, ApiError{503, lost.message(), "server_error", "", "instance_lost_a_node"});
      return true;
    }
  }
  if (cfg_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return false;
  if (req.get_header_value("Authorization") == "Bearer " + cfg_.api_key) return false;
  send_error(res, unauthorized_error());
  return true;
}

void HttpServer::install_routes() {
  httplib::Server& h = *http_;
  const size_t threads = static_cast<size_t>(cfg_.resolved_http_threads());
  h.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Hard cap well above the API limit so that oversized bodies are read and answered with a
  // proper 413 error object (httplib's own refusal has no body).
  h.set_payload_max_length(static_cast<size_t>(cfg_.max_body_bytes) * 4 + (1 << 20));

  // httplib runs this before it reads a request's body: answering a request that carries one
  // here would leave the body unread on a kept-alive connection, to be parsed as the next
  // request (a bogus 400/414 for whoever sends next on it), and would refuse without the
  // body's bootstrap room. Such requests are refused by their handlers instead.
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (carries_body(req)) return httplib::Server::HandlerResponse::Unhandled;
    return refused(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  h.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, not_found_route(req.path));
    else if (res.status == 413) send_error(res, body_too_large(cfg_.max_body_bytes));
    else send_error(res, {res.status, "bad request", "invalid_request_error", "", ""});
  });
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, api_error_from_status(internal_error(what)));
  });

  auto ctx = std::make_shared<HandlerContext>(HandlerContext{cfg_, *engine_, *tok_, prefill_.get(), decode_.get(), drain_.get()});
  h.Post("/v1/completions", [this, ctx](const httplib::Request& req, httplib::Response& res) {
    if (!refused(req, res)) handle_generate(*ctx, ApiKind::kCompletion, req, res);
  });
  h.Post("/v1/chat/completions", [this, ctx](const httplib::Request& req, httplib::Response& res) {
    if (!refused(req, res)) handle_generate(*ctx, ApiKind::kChat, req, res);
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Json m = {{"id", cfg_.served_model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "pdserve"},
              {"max_model_len", engine_->config().max_model_len}};
    send_json(res, Json{{"object", "list"}, {"data", Json::array({m})}});
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (drain_->draining.load()) return send_json(res, Json{{"status", "draining"}, {"reason", "draining"}}, 503);
    std::string why;
    if (decode_ && !decode_->healthy(&why)) return send_json(res, Json{{"status", "unhealthy"}, {"reason", why}}, 503);
    if (Status lost = engine_->group().health(); !lost.is_ok())
      return send_json(res, Json{{"status", "unhealthy"}, {"reason", lost.message()}}, 503);
    send_json(res, Json{{"status", "ok"}});
  });
  h.Get("/health_generate", [ctx](const httplib::Request&, httplib::Response& res) { handle_health_generate(*ctx, res); });
  h.Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
    const runtime::EngineStats s = engine_->stats();
    const ModelConfig& mc = engine_->model().config();
    Json info = cfg_.to_json();
    info["version"] = "0.1.0";
    info["role"] = server_role_name(cfg_.role);
    info["parallelism"] = {{"tp", cfg_.tp}, {"pp", cfg_.pp}, {"dp", 1}, {"ep", cfg_.tp}};
    if (prefill_) info["disaggregation"] = prefill_->info();
    if (decode_) info["disaggregation"] = decode_->info();
    if (prefill_ || decode_) {
      info["disaggregation"]["transport_choice"] = transport_choice_;
      info["disaggregation"]["rdma"] = transport_rdma_;
    }
    info["model"] = {{"model_type", mc.model_type}, {"vocab_size", mc.vocab_size}, {"num_layers", mc.num_layers},
                     {"max_position_embeddings", mc.max_position_embeddings}};
    info["pools"] = {{"page_size", engine_->config().page_size},
                     {"kv_cache_dtype", kv_cache_dtype_name(engine_->config().kv_cache_dtype)},
                     {"kv_bytes_per_token", engine_->group().kv(0).num_layers() * engine_->group().kv(0).entry_dim() *
                                                engine_->group().kv(0).elem_bytes()},
                     {"kv_pages_total", s.pages_total}, {"kv_pages_used", s.pages_used},
                     {"kda_slots_total", s.slots_total}, {"kda_slots_used", s.slots_used}};
    info["requests"] = {{"running", s.running}, {"waiting", s.waiting}};
    send_json(res, info);
  });
  // The last rooms one by one (newest first): bytes, runs, seconds, GB/s, peer, error.
  h.Get("/transfers", [this](const httplib::Request& req, httplib::Response& res) {
    if (!prefill_ && !decode_)
      return send_error(res, {404, "/transfers exists on prefill and decode servers only", "not_found_error", "", ""});
    size_t limit = disagg::PdMetrics::kRecentRooms;
    if (req.has_param("limit")) {
      const std::string v = req.get_param_value("limit");
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n == 0)
        return send_error(res, {400, "limit: must be a positive integer, got '" + v + "'", "invalid_request_error", "limit", ""});
      limit = static_cast<size_t>(std::min<unsigned long long>(n, limit));
    }
    const auto rooms = prefill_ ? prefill_->recent_rooms(limit) : decode_->recent_rooms(limit);
    const auto totals = prefill_ ? prefill_->metrics() : decode_->metrics();
    Json list = Json::array();
    for (const auto& r : rooms) list.push_back(r.to_json());
    send_json(res, Json{{"role", server_role_name(cfg_.role)}, {"rooms", list}, {"totals", totals.to_json()}});
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = render_metrics(engine_->stats(), engine_->metrics());
    if (prefill_) text += render_pd_metrics("prefill", prefill_->metrics());
    if (decode_) text += render_pd_metrics("decode", decode_->metrics());
    res.set_content(text, "text/plain; version=0.0.4");
  });
}

}  // namespace pdserve::server
