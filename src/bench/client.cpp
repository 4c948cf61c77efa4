#include "pdserve/bench/client.h"

#include <httplib.h>

#include <cmath>

namespace pdserve::bench {
namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void set_timeout(httplib::Client& c, double connect_s, double read_s) {
  auto split = [](double s) {
    const auto whole = static_cast<time_t>(std::floor(s));
    return std::pair<time_t, time_t>{whole, static_cast<time_t>((s - static_cast<double>(whole)) * 1e6)};
  };
  auto [cs, cus] = split(connect_s);
  auto [rs, rus] = split(read_s);
  c.set_connection_timeout(cs, cus);
  c.set_read_timeout(rs, rus);
  c.set_write_timeout(rs, rus);
}

std::string describe_http_error(httplib::Error e, const std::string& origin) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect to " + origin + " (connection refused or timed out; is the server running?)";
    case httplib::Error::Read:
      return "read from " + origin + " failed (server closed the connection or the read timed out)";
    default:
      return "HTTP request to " + origin + " failed: " + httplib::to_string(e);
  }
}

}  // namespace

Result<BaseUrl> parse_base_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return invalid_argument("base URL '" + url + "' has no scheme (http://...)");
  const size_t path_start = url.find('/', scheme_end + 3);
  BaseUrl b;
  b.origin = url.substr(0, path_start);
  if (path_start != std::string::npos) b.prefix = url.substr(path_start);
  while (!b.prefix.empty() && b.prefix.back() == '/') b.prefix.pop_back();
  if (b.origin.size() <= scheme_end + 3) return invalid_argument("base URL '" + url + "' has no host");
  return b;
}

const char* endpoint_path(EndpointKind e) {
  return e == EndpointKind::kChat ? "/v1/chat/completions" : "/v1/completions";
}

Result<std::string> build_request_body(const BenchPrompt& p, EndpointKind e, const std::string& model, bool stream) {
  Json body = Json::object();
  if (!model.empty()) body["model"] = model;
  if (e == EndpointKind::kChat) {
    if (p.is_ids()) return invalid_argument("the chat endpoint needs text prompts; this prompt is token ids");
    body["messages"] = Json::array({Json{{"role", "user"}, {"content", p.text}}});
  } else if (p.is_ids()) {
    body["prompt"] = p.ids;
  } else {
    body["prompt"] = p.text;
  }
  body["max_tokens"] = p.output_len;
  body["ignore_eos"] = true;  // exact output lengths, so every request does the same work
  body["temperature"] = 0.0;
  body["stream"] = stream;
  if (stream) body["stream_options"] = Json{{"include_usage", true}};
  return body.dump();
}

Json RequestRecord::to_json() const {
  Json j{{"index", index},
         {"warmup", warmup},
         {"category", category},
         {"input_len", input_len},
         {"expected_output_len", expected_output_len},
         {"stream", stream},
         {"completed", completed},
         {"error", error},
         {"http_status", http_status},
         {"start_s", start_s},
         {"ttft_ms", ttft_s * 1e3},
         {"e2e_ms", e2e_s * 1e3},
         {"saw_done", saw_done},
         {"token_chunks", token_chunks},
         {"content_chunks", content_chunks},
         {"output_chunks", output_chunks},
         {"finish_reason", finish_reason},
         {"prompt_tokens", usage ? Json(usage->prompt_tokens) : Json(nullptr)},
         {"completion_tokens", usage ? Json(usage->completion_tokens) : Json(nullptr)},
         {"check_failures", check_failures},
         {"output_text", output_text}};
  Json itl = Json::array();
  for (double g : itl_s) itl.push_back(g * 1e3);
  j["itl_ms"] = std::move(itl);
  if (stream && completed && usage && usage->completion_tokens > 1)
    j["tpot_ms"] = (e2e_s - ttft_s) / static_cast<double>(usage->completion_tokens - 1) * 1e3;
  return j;
}

OpenAiClient::OpenAiClient(BaseUrl url, ClientOptions opts)
    : url_(std::move(url)), opts_(std::move(opts)), http_(std::make_unique<httplib::Client>(url_.origin)) {
  set_timeout(*http_, opts_.connect_timeout_s, opts_.read_timeout_s);
  if (!opts_.api_key.empty()) http_->set_bearer_token_auth(opts_.api_key.c_str());
}

OpenAiClient::~OpenAiClient() = default;

Result<std::unique_ptr<OpenAiClient>> OpenAiClient::create(const std::string& base_url, const ClientOptions& opts) {
  PDS_ASSIGN_OR_RETURN(BaseUrl url, parse_base_url(base_url));
  return std::unique_ptr<OpenAiClient>(new OpenAiClient(std::move(url), opts));
}

Result<Json> OpenAiClient::get_json(const std::string& path) {
  auto res = http_->Get(url_.prefix + path);
  if (!res) return Status(ErrorCode::kUnavailable, describe_http_error(res.error(), url_.origin));
  if (res->status != 200)
    return not_found("GET " + url_.prefix + path + " answered HTTP " + std::to_string(res->status));
  Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return data_loss("GET " + url_.prefix + path + " did not return JSON");
  return j;
}

void OpenAiClient::send(const std::string& body, bool stream, Clock::time_point phase_start, RequestRecord& rec) {
  httplib::Request req;
  req.method = "POST";
  req.path = url_.prefix + endpoint_path(opts_.endpoint);
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (stream) req.set_header("Accept", "text/event-stream");

  std::string raw;  // non-streaming body, or an error body
  Clock::time_point last_token{};
  double first_output_s = 0;
  SseParser parser([&](const std::string& data) {
    const Clock::time_point now = Clock::now();
    if (rec.saw_done) return;  // anything after [DONE] is ignored
    if (data == "[DONE]") {
      rec.saw_done = true;
      rec.e2e_s = seconds_between(phase_start, now) - rec.start_s;
      return;
    }
    auto chunk = interpret_chunk(data, opts_.endpoint);
    if (!chunk.is_ok()) {
      if (rec.error.empty()) rec.error = chunk.status().message();
      return;
    }
    if (!chunk->error.empty()) {
      if (rec.error.empty()) rec.error = "server error in stream: " + chunk->error;
      return;
    }
    if (chunk->usage) rec.usage = chunk->usage;
    if (!chunk->finish_reason.empty()) rec.finish_reason = chunk->finish_reason;
    // Timing points are the chunks that carry a token: with a real model they are the
    // chunks with text; counting empty-text token steps too keeps TTFT defined when a
    // tiny model's first token has no printable text.
    if (chunk->carries_token) {
      if (rec.token_chunks == 0) rec.ttft_s = seconds_between(phase_start, now) - rec.start_s;
      else rec.itl_s.push_back(seconds_between(last_token, now));
      last_token = now;
      ++rec.token_chunks;
    }
    if (!chunk->text.empty()) ++rec.content_chunks;
    if (chunk->is_output && rec.output_chunks++ == 0) first_output_s = seconds_between(phase_start, now) - rec.start_s;
    rec.output_text += chunk->text;
  });
  req.response_handler = [&](const httplib::Response& r) {
    rec.http_status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stream && rec.http_status == 200) parser.feed(data, n);
    else raw.append(data, n);
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const Clock::time_point sent = Clock::now();
  rec.start_s = seconds_between(phase_start, sent);
  const bool ok = http_->send(req, res, err);
  const double end_s = seconds_between(sent, Clock::now());
  if (stream && rec.http_status == 200) parser.finish();

  if (!ok) {
    rec.error = describe_http_error(err, url_.origin);
    rec.e2e_s = end_s;
    return;
  }
  if (rec.http_status != 200) {
    rec.error = "HTTP " + std::to_string(rec.http_status) + ": " + raw.substr(0, 300);
    rec.e2e_s = end_s;
    return;
  }
  if (stream) {
    if (!rec.saw_done) {
      if (rec.error.empty()) rec.error = "stream ended without 'data: [DONE]'";
      rec.e2e_s = end_s;
    }
    // A one-token answer whose text is empty arrives as a lone closing chunk: that chunk is
    // the first token's arrival.
    if (rec.token_chunks == 0) rec.ttft_s = first_output_s;
    if (rec.error.empty() && rec.output_chunks == 0) rec.error = "stream carried no output";
    rec.completed = rec.error.empty();
    return;
  }
  // Non-streaming: the first content arrives with the whole response, so TTFT = E2E.
  rec.e2e_s = end_s;
  rec.ttft_s = end_s;
  auto full = interpret_response(raw, opts_.endpoint);
  if (!full.is_ok()) {
    rec.error = full.status().message();
    return;
  }
  rec.usage = full->usage;
  rec.finish_reason = full->finish_reason;
  rec.output_text = full->text;
  rec.completed = true;
}

const char* http_client_version() { return CPPHTTPLIB_VERSION; }

Result<std::string> preflight(const std::string& base_url, const ClientOptions& opts) {
  ClientOptions quick = opts;
  quick.read_timeout_s = std::min(opts.read_timeout_s, 30.0);
  PDS_ASSIGN_OR_RETURN(auto client, OpenAiClient::create(base_url, quick));
  auto models = client->get_json("/v1/models");
  if (!models.is_ok()) {
    if (models.status().code() == ErrorCode::kUnavailable) return models.status();
    return std::string();  // reachable, just no model list
  }
  const Json& j = *models;
  if (j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id") &&
      j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  return std::string();
}

}  // namespace pdserve::bench
