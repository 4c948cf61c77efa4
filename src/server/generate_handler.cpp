// The generation endpoints: parse -> submit -> (stream | wait) -> format.
#include <functional>
#include <memory>

#include "pdserve/net/client_connection.h"
#include "handlers.h"
#include "pdserve/server/openai_response.h"

namespace pdserve::server {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.to_json().dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void send_json(httplib::Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

namespace {

// Lives as long as the streaming response; dropping it drops the handle, which aborts the
// request if it has not finished (the client went away).
struct StreamState {
  std::shared_ptr<void> in_flight;  // counted until the stream ends (drain waits for it)
  ParsedRequest req;
  runtime::RequestHandle handle;
  std::unique_ptr<ResponseFormatter> fmt;
};

// For a non-streaming wait: true once the client hung up. The socket is looked up at the
// first check (100 ms in), so short requests never pay for the search.
std::function<bool()> client_gone(const httplib::Request& req) {
  return [&req, conn = std::optional<ClientConnection>()]() mutable {
    if (!conn) conn = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    return conn->gone();
  };
}

bool stream_events(StreamState& st, httplib::DataSink& sink) {
  for (;;) {
    auto ev = st.handle.next(std::chrono::milliseconds(100));
    if (!ev) {
      if (!sink.is_writable()) return false;  // gone while we wait for a token
      continue;
    }
    if (ev->finish_reason == runtime::FinishReason::kError) {
      const std::string err = "data: " + api_error_from_status(ev->error).to_json().dump() + "\n\ndata: [DONE]\n\n";
      sink.write(err.data(), err.size());
      sink.done();
      return true;
    }
    for (const std::string& chunk : st.fmt->chunks(*ev))
      if (!sink.write(chunk.data(), chunk.size())) return false;  // write failed: client disconnected
    if (ev->finished) {
      sink.done();
      return true;
    }
  }
}

// Prefill role: wait for decode's target, fold the prompt in, send the KV; the reply (one
// token, never streamed) only tells the router that prefill did its part.
void handle_prefill(const HandlerContext& ctx, const httplib::Request& req, ParsedRequest& p, httplib::Response& res) {
  const uint64_t room = p.bootstrap->room;
  p.gen.disagg = runtime::DisaggMode::kPrefillOnly;
  p.gen.room = room;
  // Judge the request before waiting: decode judges it the same way and refuses it, so a
  // bad request must not sit here until the bootstrap timeout.
  if (Status st = ctx.engine.check(p.gen); !st.is_ok()) return send_error(res, api_error_from_status(st));
  if (Status st = ctx.prefill->await_target(room, p.gen.prompt, client_gone(req)); !st.is_ok())
    return send_error(res, api_error_from_status(st));
  auto handle = ctx.engine.submit(p.gen);
  if (!handle.is_ok()) {
    ctx.prefill->drop(room, handle.status());
    return send_error(res, api_error_from_status(handle.status()));
  }
  std::optional<runtime::RequestEvent> done = handle->wait_unless(client_gone(req));
  if (!done) return;  // the router hung up: the abort released the room's pages and slot
  runtime::RequestEvent& all = *done;
  if (all.finish_reason == runtime::FinishReason::kError) return send_error(res, api_error_from_status(all.error));
  if (all.finish_reason == runtime::FinishReason::kAbort)
    return send_error(res, api_error_from_status(Status(ErrorCode::kUnavailable, "request aborted: the server is shutting down")));
  p.stream = false;
  ResponseFormatter fmt(p, ctx.cfg.served_model_name, ctx.tok);
  send_json(res, fmt.full(all));
}

Status require_bootstrap(const ParsedRequest& p, const char* role) {
  if (p.bootstrap) return Status::ok();
  return invalid_argument(std::string("bootstrap_room: required on a ") + role +
                          " server (send requests through `pdserve router --pd`, or add bootstrap_host, "
                          "bootstrap_port and bootstrap_room)");
}

}  // namespace

ApiError draining_error() {
  return {503, "server is draining: it is shutting down and takes no new requests; retry on another server",
          "overloaded_error", "", "server_draining"};
}

void handle_generate(const HandlerContext& ctx, ApiKind kind, const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<void> in_flight = ctx.drain ? ctx.drain->enter() : nullptr;
  // Checked after counting ourselves in, so a drain that saw zero in flight never misses us.
  if (ctx.drain && ctx.drain->draining.load()) return send_error(res, draining_error());
  if (static_cast<int64_t>(req.body.size()) > ctx.cfg.max_body_bytes) return send_error(res, body_too_large(ctx.cfg.max_body_bytes));
  RequestLimits limits;
  limits.max_model_len = ctx.engine.config().max_model_len;
  limits.max_prompt_tokens = ctx.cfg.max_prompt_tokens;
  limits.max_completion_tokens = ctx.cfg.max_completion_tokens;
  auto parsed = kind == ApiKind::kChat ? parse_chat_request(req.body, ctx.tok, limits)
                                       : parse_completion_request(req.body, ctx.tok, limits);
  if (!parsed.is_ok()) return send_error(res, api_error_from_status(parsed.status()));
  const std::string model = ctx.cfg.served_model_name;
  if (!parsed->model.empty() && parsed->model != model)
    return send_error(res, {404, "model '" + parsed->model + "' does not exist; this server serves '" + model + "'",
                            "not_found_error", "model", "model_not_found"});
  if (ctx.prefill || ctx.decode) {
    if (Status st = require_bootstrap(*parsed, ctx.prefill ? "prefill" : "decode"); !st.is_ok())
      return send_error(res, api_error_from_status(st));
  }
  if (ctx.prefill) return handle_prefill(ctx, req, *parsed, res);
  if (ctx.decode) {
    const BootstrapInfo& b = *parsed->bootstrap;
    // The pair is checked (page size, dtype, model, ...) before anything is reserved or moved.
    if (Status st = ctx.decode->prepare(b.host, b.port, b.room, parsed->gen.prompt); !st.is_ok()) {
      ctx.decode->refuse(b.host, b.port, b.room, st.message());
      return send_error(res, api_error_from_status(st));
    }
    parsed->gen.disagg = runtime::DisaggMode::kDecodeOnly;
    parsed->gen.room = b.room;
  }
  auto handle = ctx.engine.submit(parsed->gen);
  if (!handle.is_ok()) {
    if (ctx.decode) {
      const BootstrapInfo& b = *parsed->bootstrap;
      ctx.decode->drop(b.room);
      ctx.decode->refuse(b.host, b.port, b.room, handle.status().message());
    }
    return send_error(res, api_error_from_status(handle.status()));
  }

  if (!parsed->stream) {
    std::optional<runtime::RequestEvent> done = handle->wait_unless(client_gone(req));
    if (!done) return;  // nobody to answer; the abort freed the request's pages and slot
    runtime::RequestEvent& all = *done;
    if (all.finish_reason == runtime::FinishReason::kError) return send_error(res, api_error_from_status(all.error));
    if (all.finish_reason == runtime::FinishReason::kAbort)
      return send_error(res, api_error_from_status(Status(ErrorCode::kUnavailable, "request aborted: the server is shutting down")));
    ResponseFormatter fmt(*parsed, model, ctx.tok);
    return send_json(res, fmt.full(all));
  }
  auto st = std::make_shared<StreamState>();
  st->in_flight = std::move(in_flight);
  st->req = std::move(parsed).value();
  st->handle = std::move(handle).value();
  st->fmt = std::make_unique<ResponseFormatter>(st->req, model, ctx.tok);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [st](size_t, httplib::DataSink& sink) { return stream_events(*st, sink); },
      [st](bool) { st->handle.abort(); });
}

void handle_health_generate(const HandlerContext& ctx, httplib::Response& res) {
  runtime::GenerateRequest g;
  g.prompt = {ctx.tok.bos_id()};
  g.sampling.temperature = 0.0;
  g.sampling.max_tokens = 1;
  g.sampling.ignore_eos = true;
  auto handle = ctx.engine.submit(std::move(g));
  if (!handle.is_ok()) return send_error(res, api_error_from_status(handle.status()));
  runtime::RequestEvent all = handle->wait();
  if (all.token_ids.size() != 1)
    return send_error(res, api_error_from_status(Status(ErrorCode::kUnavailable, "health_generate: no token produced")));
  send_json(res, Json{{"status", "ok"}, {"token_ids", all.token_ids}});
}

}  // namespace pdserve::server
